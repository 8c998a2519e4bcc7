// Placeholder until the limits worker lands.
import Foundation
FileHandle.standardError.write(Data("askrelay-limits is not built yet\n".utf8))
exit(69)
