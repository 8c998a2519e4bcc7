// Placeholder until the parent worker lands.
import Foundation
FileHandle.standardError.write(Data("askrelay-parent is not built yet\n".utf8))
exit(69)
