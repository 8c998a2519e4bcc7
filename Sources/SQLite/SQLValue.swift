/// One SQLite value, as bound to a parameter or read from a column.
public enum SQLValue: Sendable, Hashable {
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
    case null
}

extension SQLValue: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByStringLiteral,
    ExpressibleByNilLiteral
{
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .real(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(nilLiteral: ()) { self = .null }
}
