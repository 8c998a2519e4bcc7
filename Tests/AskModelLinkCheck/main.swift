import AskModel
import Foundation

// A program that depends on AskModel alone, so that a test can show with `ldd` that the model links no libzmq.
// It reads one question (JSON) from stdin, validates it and prints `valid <canonical JSON>` (exit 0) or
// `invalid <field> <code>` (exit 1); input that is not a question is exit 65.

let input = FileHandle.standardInput.readDataToEndOfFile()
do {
    let question = try WireJSON.decode(AnyPermissionQuestion.self, from: input)
    if let reason = question.firstViolation() {
        print("invalid \(reason.field) \(reason.code)")
        exit(1)
    }
    print("valid " + (try WireJSON.encodeString(question)))
} catch {
    FileHandle.standardError.write(Data("askmodel-linkcheck: stdin is not a question: \(error)\n".utf8))
    exit(65)
}
