/// A failure a helper throws, with a message naming what it waited for and what it saw instead.
public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
