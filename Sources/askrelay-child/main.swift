// Placeholder until the child worker lands.
import Foundation
FileHandle.standardError.write(Data("askrelay-child is not built yet\n".utf8))
exit(69)
