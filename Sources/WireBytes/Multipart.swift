// A multipart message as bytes: one contiguous storage plus frame boundaries. The ZeroMQ wrapper sends and
// receives it; the wire codec (AskProtocol) parses and encodes it without linking libzmq.

/// A multipart message stored as one contiguous byte buffer plus frame boundaries, built for reuse in hot loops.
public struct Multipart: Sendable, Equatable {
    /// Every frame's bytes, back to back; frame `i` is `storage[range(of: i)]`.
    @usableFromInline var _storage: [UInt8] = []
    /// Every frame's bytes, back to back.
    @inlinable public var storage: [UInt8] { _storage }
    @usableFromInline var ends: [Int] = []

    public init() {
        _storage.reserveCapacity(512)
        ends.reserveCapacity(12)
    }

    /// Builds a message from frames.
    public init(_ frames: [[UInt8]]) {
        self.init()
        for frame in frames { append(frame) }
    }

    /// The number of frames.
    @inlinable public var count: Int { ends.count }

    /// The total size of all frames, in bytes.
    @inlinable public var byteCount: Int { _storage.count }

    @inlinable public mutating func removeAll() {
        _storage.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
    }

    @inlinable public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        _storage.append(contentsOf: bytes)
        ends.append(_storage.count)
    }

    @inlinable public mutating func append(_ bytes: [UInt8]) {
        _storage.append(contentsOf: bytes)
        ends.append(_storage.count)
    }

    @inlinable public mutating func append(_ string: String) {
        _storage.append(contentsOf: string.utf8)
        ends.append(_storage.count)
    }

    /// Appends one frame built in place: `build` appends the frame's bytes to the end of the storage (it MUST NOT
    /// change the bytes already there). No intermediate array.
    @inlinable public mutating func appendFrame(_ build: (inout [UInt8]) -> Void) {
        build(&_storage)
        ends.append(_storage.count)
    }

    /// The byte range of frame `index` within the storage.
    @inlinable public func range(of index: Int) -> Range<Int> {
        (index == 0 ? 0 : ends[index - 1])..<ends[index]
    }

    /// The size of frame `index`.
    @inlinable public func size(of index: Int) -> Int { range(of: index).count }

    /// Lends the bytes of frame `index` without copying.
    @inlinable public func withFrame<R>(_ index: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let range = range(of: index)
        return try _storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// A copy of frame `index`.
    @inlinable public subscript(index: Int) -> ArraySlice<UInt8> { _storage[range(of: index)] }

    /// Copies of every frame.
    public var frames: [[UInt8]] { (0..<count).map { Array(self[$0]) } }
}
