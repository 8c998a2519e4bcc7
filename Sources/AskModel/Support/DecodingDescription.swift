/// Says what is wrong with a JSON document in words for a person, naming the field as a path a reader writes:
/// `missing field 'endpoints[0].address'`, `wrong type at 'children.c1.eligible'`, `bad value at 'role': ...`.
/// Every decoder in the project reports through this, so the messages read the same everywhere.
public func describeDecoding(_ error: any Error) -> String {
    guard let error = error as? DecodingError else { return "\(error)" }
    switch error {
    case .keyNotFound(let key, let context): return "missing field '\(codingPath(context.codingPath + [key]))'"
    case .typeMismatch(_, let context): return "wrong type at '\(codingPath(context.codingPath))'"
    case .valueNotFound(_, let context): return "missing value at '\(codingPath(context.codingPath))'"
    case .dataCorrupted(let context):
        let at = codingPath(context.codingPath)
        return at.isEmpty ? "malformed JSON" : "bad value at '\(at)': \(context.debugDescription)"
    @unknown default: return "\(error)"
    }
}

/// `endpoints[0].address`, not `endpoints.Index 0.address`.
func codingPath(_ keys: [any CodingKey]) -> String {
    var text = ""
    for key in keys {
        if let index = key.intValue {
            text += "[\(index)]"
        } else {
            text += (text.isEmpty ? "" : ".") + key.stringValue
        }
    }
    return text
}
