import CZeroMQ

/// Z85 text encoding of binary data (ZeroMQ RFC 32): 4 bytes become 5 printable characters.
public enum Z85 {
    /// Encodes bytes whose count is a multiple of 4.
    /// - Throws: ``ZMQError`` with `EINVAL` when the size is not a multiple of 4.
    public static func encode(_ bytes: [UInt8]) throws -> String {
        guard bytes.count % 4 == 0 else {
            throw ZMQError(code: EINVAL, call: "zmq_z85_encode", context: "\(bytes.count) bytes is not a multiple of 4")
        }
        var text = [CChar](repeating: 0, count: bytes.count * 5 / 4 + 1)
        let ok = text.withUnsafeMutableBufferPointer { out in
            bytes.withUnsafeBufferPointer { zmq_z85_encode(out.baseAddress, $0.baseAddress, $0.count) != nil }
        }
        guard ok else { throw ZMQError(code: zmq_errno(), call: "zmq_z85_encode") }
        return String(decoding: text.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Decodes Z85 text whose length is a multiple of 5. Empty text decodes to no bytes, mirroring ``encode(_:)``.
    /// - Throws: ``ZMQError`` with `EINVAL` for a bad length or a character outside the Z85 alphabet.
    public static func decode(_ text: String) throws -> [UInt8] {
        // libzmq refuses empty input, although it encodes no bytes as empty text.
        if text.isEmpty { return [] }
        let utf8 = Array(text.utf8)
        let alphabet = Set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8)
        guard utf8.count % 5 == 0, utf8.allSatisfy(alphabet.contains) else {
            throw ZMQError(code: EINVAL, call: "zmq_z85_decode", context: "not Z85 text")
        }
        var bytes = [UInt8](repeating: 0, count: utf8.count * 4 / 5)
        let ok = bytes.withUnsafeMutableBufferPointer { out in zmq_z85_decode(out.baseAddress, text) != nil }
        guard ok else { throw ZMQError(code: EINVAL, call: "zmq_z85_decode", context: "not Z85 text") }
        return bytes
    }
}

extension CurveKeyPair {
    /// Generates a fresh key pair.
    /// - Throws: ``ZMQError`` with `ENOTSUP` when libzmq was built without CURVE.
    public static func generate() throws -> CurveKeyPair {
        var pub = [CChar](repeating: 0, count: 41)
        var sec = [CChar](repeating: 0, count: 41)
        try zmqCheck("zmq_curve_keypair") { zmq_curve_keypair(&pub, &sec) }
        return CurveKeyPair(publicKey: curveKeyString(pub), secretKey: curveKeyString(sec))
    }

    /// Rebuilds a key pair from its secret key, deriving the public key.
    /// - Throws: ``ZMQError`` when the secret key is not 40 characters of Z85.
    public init(secretKey: String) throws {
        guard secretKey.utf8.count == 40, (try? Z85.decode(secretKey)) != nil else {
            throw ZMQError(code: EINVAL, call: "zmq_curve_public", context: "secret key must be 40 characters of Z85")
        }
        var pub = [CChar](repeating: 0, count: 41)
        try zmqCheck("zmq_curve_public") { zmq_curve_public(&pub, secretKey) }
        self.init(publicKey: curveKeyString(pub), secretKey: secretKey)
    }
}

private func curveKeyString(_ chars: [CChar]) -> String {
    String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

extension ZMQSocket {
    /// Makes this socket a CURVE server with the given key pair.
    public func makeCurveServer(_ keys: CurveKeyPair) throws {
        try set(.curveServer, true)
        try set(.curveSecretKey, keys.secretKey)
    }

    /// Makes this socket a CURVE client of the server whose public key is `serverKey`.
    public func makeCurveClient(_ keys: CurveKeyPair, serverKey: String) throws {
        try set(.curveServerKey, serverKey)
        try set(.curvePublicKey, keys.publicKey)
        try set(.curveSecretKey, keys.secretKey)
    }
}
