public import Foundation

/// How a persistent layer turns keys into strings and back.
///
/// Persistent layers (the disk, SQLite, Redis and UserDefaults layers) store
/// keys as strings. An encoding must be **injective**: two different keys must never encode to
/// the same string, or one key would read the other's value. The built-in encodings are:
///
/// | Encoding | Keys | Encoded form |
/// |---|---|---|
/// | ``string`` | `String` | the string itself |
/// | ``description`` | `LosslessStringConvertible` (integers, `Character`, …) | `description` |
/// | ``rawValue`` | `RawRepresentable` with `String` raw values | `rawValue` |
/// | ``uuid`` | `UUID` | `uuidString` |
/// | ``json`` | `Codable` | JSON with sorted object keys, no whitespace |
///
/// JSON is injective for any type whose `Codable` conformance is (two different values encode
/// differently), which holds for synthesized conformances. It is also deterministic, with one
/// exception to keep out of keys: a `Set`, or a `Dictionary` whose keys are not strings, encodes
/// its elements in hash order, which changes from process to process, so an equal key would
/// encode differently after a restart and miss. Likewise `description` encodes `0.0` and
/// `-0.0`, which are equal, differently. `decode` makes stored keys enumerable; it throws for
/// strings that no key encodes to.
public struct CacheKeyEncoding<Key: Sendable>: Sendable {
  /// Encodes a key. Throws when the key cannot be represented.
  public let encode: @Sendable (Key) throws -> String
  /// Decodes a string produced by ``encode``. Throws for any other string.
  public let decode: @Sendable (String) throws -> Key

  /// An encoding from a pair of closures; `encode` must be injective and `decode` its inverse.
  public init(
    encode: @escaping @Sendable (Key) throws -> String,
    decode: @escaping @Sendable (String) throws -> Key
  ) {
    self.encode = encode
    self.decode = decode
  }
}

extension CacheKeyEncoding where Key == String {
  /// String keys, stored as they are.
  public static var string: CacheKeyEncoding<String> {
    CacheKeyEncoding(encode: { $0 }, decode: { $0 })
  }
}

extension CacheKeyEncoding where Key: LosslessStringConvertible {
  /// Keys stored as their `description` and read back with `init(_:)`.
  public static var description: CacheKeyEncoding<Key> {
    CacheKeyEncoding(
      encode: { $0.description },
      decode: { string in
        guard let key = Key(string) else { throw PersistenceError.undecodableKey(string) }
        return key
      }
    )
  }
}

extension CacheKeyEncoding where Key: RawRepresentable, Key.RawValue == String {
  /// Keys stored as their `String` raw value.
  public static var rawValue: CacheKeyEncoding<Key> {
    CacheKeyEncoding(
      encode: { $0.rawValue },
      decode: { string in
        guard let key = Key(rawValue: string) else { throw PersistenceError.undecodableKey(string) }
        return key
      }
    )
  }
}

extension CacheKeyEncoding where Key == UUID {
  /// UUID keys stored as `uuidString`.
  public static var uuid: CacheKeyEncoding<UUID> {
    CacheKeyEncoding(
      encode: { $0.uuidString },
      decode: { string in
        guard let key = UUID(uuidString: string) else { throw PersistenceError.undecodableKey(string) }
        return key
      }
    )
  }
}

extension CacheKeyEncoding where Key: Codable {
  /// Keys stored as compact JSON with sorted object keys, so that equal keys encode to the same
  /// string (keys holding a `Set` or a non-string-keyed `Dictionary` excepted; see the type's
  /// documentation).
  public static var json: CacheKeyEncoding<Key> {
    CacheKeyEncoding(
      encode: { key in
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
          return String(decoding: try encoder.encode(key), as: UTF8.self)
        } catch {
          throw PersistenceError(
            code: .encodingFailed, message: "cannot encode the key \(key) as JSON", underlying: error)
        }
      },
      decode: { string in
        do {
          return try JSONDecoder().decode(Key.self, from: Data(string.utf8))
        } catch {
          throw PersistenceError.undecodableKey(string, underlying: error)
        }
      }
    )
  }
}
