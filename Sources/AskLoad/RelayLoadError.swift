/// A load experiment or benchmark server that could not run: what went wrong, for the person running it.
public struct RelayLoadError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
