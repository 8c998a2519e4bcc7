import AskProtocol
import Foundation

// The fuzz target over the frame parser and the message decoders.
//
// Input layout: byte 0 chooses the mode.
// - even: a multipart message; then frames as [length: UInt16 little-endian][bytes], up to 16 frames. It is parsed
//   as a DEALER sees it (base 0) and as the broker's ROUTER sees it (base 1), and a parsed body is decoded as its kind.
// - odd: a JSON body; byte 1 picks the message kind (or HELLO / WELCOME), the rest is the body. A body the registry
//   decodes is also held to the fast JSON path: it declines or decodes Foundation's value, and encodes Foundation's bytes.
// Built with `make fuzz` (libFuzzer); without -DFUZZING it is a replayer of corpus files, used by `make test`.

let kinds = MessageKind.allCases

func fuzzOne(_ data: UnsafeRawBufferPointer) {
    guard let mode = data.first else { return }
    if mode & 1 == 1 {
        guard data.count >= 2 else { return }
        let body = UnsafeRawBufferPointer(rebasing: data[2...]).bindMemory(to: UInt8.self)
        let pick = Int(data[1]) % (kinds.count + 2)
        if pick == kinds.count {
            _ = try? SessionJSON.decode(Hello.self, from: body)
        } else if pick == kinds.count + 1 {
            _ = try? SessionJSON.decode(Welcome.self, from: body)
        } else if let message = try? AppMessageRegistry.decode(kind: kinds[pick].rawValue, from: body) {
            checkFastJSON(kinds[pick].bodyType, body, decoded: message)
            // Whatever decodes must encode, and a decoded question must validate without trapping.
            _ = try? AppMessageBody(message).map { try $0.encoded() }
            if let ask = message as? AskRequest { _ = ask.question.firstViolation(now: Date()) }
        }
        return
    }
    var message = Multipart()
    var offset = 1
    while offset + 2 <= data.count && message.count < 16 {
        let length = Int(data[offset]) | Int(data[offset + 1]) << 8
        offset += 2
        let end = min(data.count, offset + length)
        message.append(UnsafeRawBufferPointer(rebasing: data[offset..<end]))
        offset = end
    }
    for base in [0, 1] where message.count > base {
        guard let parsed = try? WireParser.parse(message, base: base) else {
            // What the broker does with a refused message: look for the id its NACK carries.
            _ = WireParser.idOfRefused(message, base: base)
            continue
        }
        switch parsed.command {
        case .send, .deliver:
            _ = try? AppMessageRegistry.decode(kind: message.kind(parsed), from: Array(message[parsed.bodyFrame]))
        case .hello:
            _ = try? SessionJSON.decode(Hello.self, from: Array(message[parsed.bodyFrame]))
        case .ack:
            _ = message.ackIDs(parsed)
        default:
            break
        }
    }
}

/// The hand-written JSON path must decline a body or decode it to Foundation's value, and must encode what was
/// decoded to Foundation's bytes.
func checkFastJSON<T: AppMessage>(_ type: T.Type, _ body: UnsafeBufferPointer<UInt8>, decoded: any AppMessage) {
    if let fast = WireJSON.fastDecode(T.self, from: body) {
        guard let reference = try? WireJSON.foundationDecode(T.self, from: body), reference == fast else {
            fatalError("the fast JSON path decoded a \(T.kind) body that Foundation reads differently or refuses")
        }
    }
    guard let message = decoded as? T else {
        fatalError("the registry decoded a \(T.kind) body as \(Swift.type(of: decoded))")
    }
    guard WireJSON.fastEncode(message) == (try? WireJSON.foundationEncode(message)) else {
        fatalError("the fast JSON path encoded a \(T.kind) body differently from Foundation")
    }
}

#if FUZZING
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzerTestOneInput(_ bytes: UnsafePointer<UInt8>, _ count: Int) -> CInt {
        fuzzOne(UnsafeRawBufferPointer(start: bytes, count: count))
        return 0
    }
#else
    /// Replays corpus files (or every file in corpus folders) through the fuzz target; exits non-zero on a trap.
    @main
    struct FuzzReplay {
        static func main() {
            let arguments = Array(CommandLine.arguments.dropFirst())
            if arguments.isEmpty || arguments.contains("--help") {
                print(
                    "usage: askrelay-fuzz FILE|DIR... — replay inputs through the protocol fuzz target (make fuzz builds the fuzzer)"
                )
                exit(arguments.isEmpty ? 64 : 0)
            }
            var files: [String] = []
            for path in arguments {
                var isDirectory: ObjCBool = false
                guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                    FileHandle.standardError.write(Data("askrelay-fuzz: no such file or folder: \(path)\n".utf8))
                    exit(66)
                }
                if isDirectory.boolValue {
                    let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                    files += names.sorted().map { path + "/" + $0 }
                } else {
                    files.append(path)
                }
            }
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                data.withUnsafeBytes { fuzzOne($0) }
            }
            print("replayed \(files.count) inputs, no crash")
        }
    }
#endif
