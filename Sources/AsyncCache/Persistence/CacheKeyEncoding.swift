public import Foundation

/// How a persistent layer turns keys into strings and back.
///
/// Persistent layers (the disk, SQLite, Redis and UserDefaults layers) store keys as strings.
///
/// ## Key identity
///
/// Every layer, and the in-flight table of a ``LoadingCache``, tells keys apart the way Swift
/// does: two keys are the same entry exactly when they are `==`. For strings, `==` is canonical
/// equivalence: `"caf\u{E9}"` (precomposed) and `"cafe\u{301}"` (a combining accent) are one
/// key. So that a persistent layer agrees with a ``MemoryLayer`` above it, ``encode`` returns its
/// string in Unicode Normalization Form C (NFC), whatever the closure it was made from returns:
/// canonically equivalent strings become the same bytes, and persistent layers compare those
/// bytes. A chain therefore gives the same answer as any one of its layers.
///
/// An encoding must be **injective** up to that rule: keys that are not `==` must encode to
/// strings that are not canonically equivalent, or one key would read the other's value. Keys
/// that are `==` must encode to canonically equivalent strings. The built-in encodings are:
///
/// | Encoding | Keys | Encoded form |
/// |---|---|---|
/// | ``string`` | `String` | the string itself (in NFC) |
/// | ``description`` | `LosslessStringConvertible` (integers, `Character`, …) | `description` |
/// | ``rawValue`` | `RawRepresentable` with `String` raw values | `rawValue` |
/// | ``uuid`` | `UUID` | `uuidString` |
/// | ``json`` | `Codable` | JSON with sorted object keys, no whitespace |
///
/// JSON is injective for any type whose `Codable` conformance is (two different values encode
/// differently), which holds for synthesized conformances. Equal keys encode alike, also when
/// their strings are spelt differently (the members of each object are sorted by their names in
/// NFC). It is also deterministic, with one exception to keep out of keys: a `Set`, or a `Dictionary` whose keys are not strings, encodes
/// its elements in hash order, which changes from process to process, so an equal key would
/// encode differently after a restart and miss. Likewise `description` encodes `0.0` and
/// `-0.0`, which are equal, differently. `decode` makes stored keys enumerable; it throws for
/// strings that no key encodes to.
///
/// Keys whose identity is their exact bytes (say, a type whose `==` compares `utf8` views)
/// must encode to strings that keep those bytes apart under NFC, for example as hexadecimal.
public struct CacheKeyEncoding<Key: Sendable>: Sendable {
  /// Encodes a key, in Unicode Normalization Form C (see "Key identity" in ``CacheKeyEncoding``). Throws when the
  /// key cannot be represented.
  ///
  /// Costs the closure the encoding was made from, plus a scan of its result: a string whose
  /// scalars are all below U+0300 (ASCII and the Latin-1 and Latin Extended letters) is in NFC
  /// already; any other string is normalized.
  public let encode: @Sendable (Key) throws -> String
  /// Decodes a string produced by ``encode``. Throws for any other string.
  public let decode: @Sendable (String) throws -> Key

  /// Encodes `key` for the layer `component` names: a ``PersistenceError`` the encoding throws
  /// passes as it is, any other error becomes ``PersistenceError/Code/encodingFailed`` naming
  /// the component and the key.
  package func encode(_ key: Key, for component: @autoclosure () -> String) throws -> String {
    do {
      return try encode(key)
    } catch let error as PersistenceError {
      throw error
    } catch {
      throw PersistenceError(
        code: .encodingFailed, message: "\(component()) cannot encode the key \(key)", underlying: error)
    }
  }

  /// An encoding from a pair of closures: `encode` must be injective up to canonical
  /// equivalence (see "Key identity" in ``CacheKeyEncoding``), and `decode` its inverse. What `encode` returns is
  /// normalized to NFC before any layer sees it.
  public init(
    encode: @escaping @Sendable (Key) throws -> String,
    decode: @escaping @Sendable (String) throws -> Key
  ) {
    self.encode = { key in try encode(key).nfcNormalized }
    self.decode = decode
  }

  /// An encoding whose `encode` returns NFC already.
  private init(
    normalizedEncode: @escaping @Sendable (Key) throws -> String, decode: @escaping @Sendable (String) throws -> Key
  ) {
    self.encode = normalizedEncode
    self.decode = decode
  }
}

extension String {
  /// The string in Unicode Normalization Form C: how persistent layers store encoded keys and
  /// namespaces (see "Key identity" in ``CacheKeyEncoding``).
  ///
  /// Canonically equivalent strings, which Swift calls equal, come out as the same bytes; a
  /// string already in NFC comes out unchanged. O(n); a string whose scalars are all below
  /// U+0300 is in NFC (no scalar there composes or decomposes) and is returned after one scan
  /// of its UTF-8 bytes (lead bytes below `0xCC`).
  ///
  /// The standard library's own normalization, the one `==` compares by: Foundation's
  /// `precomposedStringWithCanonicalMapping` may use older Unicode tables, and then leaves apart
  /// characters that `==` (and a ``MemoryLayer``) calls equal, such as the compositions new in
  /// Unicode 16. `_nfcCodeUnits` is public, if underscored, and has been there since Swift 5.7.
  package var nfcNormalized: String {
    if utf8.allSatisfy({ $0 < 0xCC }) { return self }
    let normalized = _nfcCodeUnits
    if normalized.elementsEqual(utf8) { return self }
    return String(decoding: normalized, as: UTF8.self)
  }

  /// Whether the string is in Unicode Normalization Form C, as ``nfcNormalized`` returns it.
  package var isNFC: Bool {
    utf8.allSatisfy({ $0 < 0xCC }) || _nfcCodeUnits.elementsEqual(utf8)
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
      normalizedEncode: { key in
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
          // In NFC, with each object's members sorted by their normalized names.
          return CanonicalJSON.normalized(String(decoding: try encoder.encode(key), as: UTF8.self))
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

/// A key type with an encoding that persistent layers take when they are given none, so that
/// `SQLiteLayer<Int, Product>(url:)` needs no `keyEncoding:`.
///
/// `String` (``CacheKeyEncoding/string``), the integer types (``CacheKeyEncoding/description``)
/// and `UUID` (``CacheKeyEncoding/uuid``) conform. A type of your own conforms in one line when
/// it is `RawRepresentable` with a raw value that conforms (its raw value's encoding), or
/// `LosslessStringConvertible` (its `description`):
///
/// ```swift
/// enum Region: String { case eu, us }
/// extension Region: CacheKeyEncodable {}
///
/// let byRegion = try await SQLiteLayer<Region, Product>(url: url)
/// ```
///
/// Any other type implements ``cacheKeyEncoding`` (``CacheKeyEncoding/json`` suits `Codable`
/// keys), or passes a `keyEncoding:` to the layer's initializer. An encoding must tell apart
/// the keys that are not `==` (see "Key identity" in ``CacheKeyEncoding``).
public protocol CacheKeyEncodable: Hashable, Sendable {
  /// How persistent layers store keys of this type when they are given no encoding.
  static var cacheKeyEncoding: CacheKeyEncoding<Self> { get }
}

extension CacheKeyEncodable where Self: LosslessStringConvertible {
  /// ``CacheKeyEncoding/description``.
  public static var cacheKeyEncoding: CacheKeyEncoding<Self> { .description }
}

extension CacheKeyEncodable where Self: RawRepresentable, RawValue: CacheKeyEncodable {
  /// The raw value's encoding.
  public static var cacheKeyEncoding: CacheKeyEncoding<Self> { rawValueEncoding }

  /// Keys stored as their raw value is.
  fileprivate static var rawValueEncoding: CacheKeyEncoding<Self> {
    let raw = RawValue.cacheKeyEncoding
    return CacheKeyEncoding(
      encode: { try raw.encode($0.rawValue) },
      decode: { string in
        guard let key = Self(rawValue: try raw.decode(string)) else { throw PersistenceError.undecodableKey(string) }
        return key
      })
  }
}

extension CacheKeyEncodable where Self: RawRepresentable & LosslessStringConvertible, RawValue: CacheKeyEncodable {
  /// The raw value's encoding, for a type that has both a raw value and a description.
  public static var cacheKeyEncoding: CacheKeyEncoding<Self> { rawValueEncoding }
}

extension String: CacheKeyEncodable {
  /// ``CacheKeyEncoding/string``.
  public static var cacheKeyEncoding: CacheKeyEncoding<String> { .string }
}

extension UUID: CacheKeyEncodable {
  /// ``CacheKeyEncoding/uuid``.
  public static var cacheKeyEncoding: CacheKeyEncoding<UUID> { .uuid }
}

extension Int: CacheKeyEncodable {}
extension Int8: CacheKeyEncodable {}
extension Int16: CacheKeyEncodable {}
extension Int32: CacheKeyEncodable {}
extension Int64: CacheKeyEncodable {}
extension UInt: CacheKeyEncodable {}
extension UInt8: CacheKeyEncodable {}
extension UInt16: CacheKeyEncodable {}
extension UInt32: CacheKeyEncodable {}
extension UInt64: CacheKeyEncodable {}
