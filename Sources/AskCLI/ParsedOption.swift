extension Arguments {
    /// An option's value read by `parse` (a type's own parser): `nil` when the option is not given; a parse error
    /// becomes a ``UsageError`` that names where the value came from (the option or its environment variable).
    public func parsed<Value>(_ name: String, _ parse: (String) throws -> Value) throws -> Value? {
        guard let text = string(name) else { return nil }
        do {
            return try parse(text)
        } catch {
            throw UsageError("\(origin(name)): \(error)")
        }
    }
}
