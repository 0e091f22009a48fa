public import Foundation

/// How a persistent layer turns values into bytes and back.
///
/// `Data` values are stored raw with ``data``; `Codable` values go through ``json`` (the
/// default of the `Codable` layer initializers) or ``propertyList``; anything else through a
/// pair of closures. A value that fails to decode on read (say, the model changed in an app
/// update) is treated like a damaged one: a miss, deleted and counted.
public struct CacheValueCoder<Value: Sendable>: Sendable {
  /// Encodes a value to the bytes that are stored.
  public let encode: @Sendable (Value) throws -> Data
  /// Decodes stored bytes back into a value.
  public let decode: @Sendable (Data) throws -> Value

  /// A coder from a pair of closures; `decode` must invert `encode`.
  public init(
    encode: @escaping @Sendable (Value) throws -> Data,
    decode: @escaping @Sendable (Data) throws -> Value
  ) {
    self.encode = encode
    self.decode = decode
  }
}

extension CacheValueCoder where Value == Data {
  /// `Data` stored as it is.
  public static var data: CacheValueCoder<Data> {
    CacheValueCoder(encode: { $0 }, decode: { $0 })
  }
}

extension CacheValueCoder where Value == String {
  /// Strings stored as UTF-8.
  public static var utf8: CacheValueCoder<String> {
    CacheValueCoder(
      encode: { Data($0.utf8) },
      decode: { data in
        guard let string = String(bytes: data, encoding: .utf8) else {
          throw PersistenceError(code: .decodingFailed, message: "the stored bytes are not valid UTF-8")
        }
        return string
      }
    )
  }
}

extension CacheValueCoder where Value: Codable {
  /// `Codable` values stored as JSON.
  public static var json: CacheValueCoder<Value> {
    CacheValueCoder(
      encode: { try JSONEncoder().encode($0) },
      decode: { try JSONDecoder().decode(Value.self, from: $0) }
    )
  }

  /// `Codable` values stored as binary property lists (smaller and faster than JSON for
  /// values with many numbers).
  public static var propertyList: CacheValueCoder<Value> {
    CacheValueCoder(
      encode: { value in
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        return try encoder.encode(value)
      },
      decode: { try PropertyListDecoder().decode(Value.self, from: $0) }
    )
  }
}
