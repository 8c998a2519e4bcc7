/// A CURVE key pair, held as 40-character Z85 text (the form libzmq's options and key files use).
///
/// A value only: generating a pair or deriving a public key needs libzmq, and lives in the `ZeroMQ` target
/// (`CurveKeyPair.generate()`, `CurveKeyPair(secretKey:)`).
public struct CurveKeyPair: Sendable, Hashable, Codable {
    public let publicKey: String
    public let secretKey: String

    public init(publicKey: String, secretKey: String) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}
