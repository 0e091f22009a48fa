public import Foundation

/// Runs a transform of an operator: its errors become ``AsyncCacheError/Code/transformFailed``
/// naming `what`; `CancellationError` passes through.
@inlinable
func transforming<Output>(
  _ what: @autoclosure () -> String,
  _ body: () async throws -> Output
) async throws -> Output {
  do {
    return try await body()
  } catch {
    throw transformFailure(error, what())
  }
}

/// Runs a synchronous transform of an operator, with the errors of ``transforming(_:_:)``.
///
/// The operators call it on their hit paths when the user's function is synchronous: a branch
/// with no potential suspension lets the optimizer drop the executor checks around it.
@inlinable @inline(__always)
func transformingNow<Output>(
  _ what: @autoclosure () -> String,
  _ body: () throws -> Output
) throws -> Output {
  do {
    return try body()
  } catch {
    throw transformFailure(error, what())
  }
}

/// The error of a transform that threw `error`: `CancellationError` and an inner operator's
/// ``AsyncCacheError/Code/transformFailed`` as they are, ``AsyncCacheError/Code/transformFailed``
/// naming `what` otherwise.
@usableFromInline
func transformFailure(_ error: any Error, _ what: String) -> any Error {
  if error is CancellationError { return CancellationError() }
  // A transform that asked a cache for a key loading it waits for is not a failed transform:
  // the error is the cache's own, and says so.
  if let error = error as? AsyncCacheError, error.code == .transformFailed || error.code == .recursiveLoad {
    return error
  }
  return AsyncCacheError(code: .transformFailed, message: "\(what) failed", underlying: error)
}

/// Describes a key for an error message, cut short when long.
@usableFromInline
func describeKey(_ key: some Any) -> String {
  let described = String(describing: key)
  return described.count > 120 ? described.prefix(120) + "…" : described
}

/// A function of an operator, kept synchronous when it was given as one, so that a hit through
/// a stack of operators with synchronous functions makes no `async` call beyond the layers'.
@usableFromInline
struct OperatorFunction<Input: Sendable, Output: Sendable>: Sendable {
  // Two optional closures, not an enum with a payload: calling a closure stored in a constant
  // costs no reference counting, binding one out of an enum case retains and releases it, which
  // on the hit path of a stack of operators cost more than the rest of the lookup.
  @usableFromInline let synchronous: (@Sendable (Input) throws -> Output)?
  @usableFromInline let asynchronous: (@Sendable (Input) async throws -> Output)?

  @usableFromInline
  init(synchronous: (@Sendable (Input) throws -> Output)?, asynchronous: (@Sendable (Input) async throws -> Output)?) {
    self.synchronous = synchronous
    self.asynchronous = asynchronous
  }

  @inlinable
  static func sync(_ body: @escaping @Sendable (Input) throws -> Output) -> Self {
    Self(synchronous: body, asynchronous: nil)
  }

  @inlinable
  static func async(_ body: @escaping @Sendable (Input) async throws -> Output) -> Self {
    Self(synchronous: nil, asynchronous: body)
  }

  /// Whether the function is synchronous.
  @inlinable
  var isSynchronous: Bool { synchronous != nil }

  @inlinable
  func callAsFunction(_ input: Input) async throws -> Output {
    if isSynchronous { return try synchronous!(input) }
    return try await asynchronous!(input)
  }
}

/// A two-way conversion between the values of two layers, for
/// ``AsyncCacheLayer/mappingValues(_:)``: `Data` on disk and a decoded model in memory, say.
///
/// Both directions may throw; a throw becomes ``AsyncCacheError/Code/transformFailed``. Give
/// synchronous functions when you can: a hit through the layer then makes no extra `async`
/// call.
///
/// ```swift
/// let users: some AsyncCacheLayer<Int, User> = disk.mappingValues(.json(User.self))
/// let celsius = kelvin.mappingValues(ValueTransform(decode: { $0 - 273.15 }, encode: { $0 + 273.15 }))
/// ```
public struct ValueTransform<Stored: Sendable, Value: Sendable>: Sendable {
  @usableFromInline let decoder: OperatorFunction<Stored, Value>
  @usableFromInline let encoder: OperatorFunction<Value, Stored>

  @usableFromInline
  init(decoder: OperatorFunction<Stored, Value>, encoder: OperatorFunction<Value, Stored>) {
    self.decoder = decoder
    self.encoder = encoder
  }

  /// Creates a transform from its two directions, both synchronous.
  ///
  /// - Parameters:
  ///   - decode: Converts a stored value (what the base layer holds) into a value.
  ///   - encode: Converts a value into what the base layer stores.
  public init(
    decode: @escaping @Sendable (Stored) throws -> Value,
    encode: @escaping @Sendable (Value) throws -> Stored
  ) {
    self.init(decoder: .sync(decode), encoder: .sync(encode))
  }

  /// Creates a transform from its two directions, which may suspend.
  ///
  /// - Parameters:
  ///   - decode: Converts a stored value (what the base layer holds) into a value.
  ///   - encode: Converts a value into what the base layer stores.
  public init(
    decode: @escaping @Sendable (Stored) async throws -> Value,
    encode: @escaping @Sendable (Value) async throws -> Stored
  ) {
    self.init(decoder: .async(decode), encoder: .async(encode))
  }

  /// Converts a stored value (what the base layer holds) into a value.
  @inlinable
  public func decode(_ stored: Stored) async throws -> Value {
    try await decoder(stored)
  }

  /// Converts a value into what the base layer stores.
  @inlinable
  public func encode(_ value: Value) async throws -> Stored {
    try await encoder(value)
  }

  /// The transform in the other direction.
  public var reversed: ValueTransform<Value, Stored> {
    ValueTransform<Value, Stored>(decoder: encoder, encoder: decoder)
  }
}

extension ValueTransform where Stored == Data {
  /// JSON: `Data` holding the JSON encoding of a `Codable` value.
  ///
  /// - Parameters:
  ///   - type: The type of the values.
  ///   - encoder: The encoder; a new `JSONEncoder` with sorted keys by default, so that equal
  ///     values encode to equal bytes.
  ///   - decoder: The decoder; a new `JSONDecoder` by default.
  public static func json(
    _ type: Value.Type = Value.self,
    encoder: @escaping @Sendable () -> JSONEncoder = {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys]
      return encoder
    },
    decoder: @escaping @Sendable () -> JSONDecoder = { JSONDecoder() }
  ) -> ValueTransform where Value: Codable {
    ValueTransform(
      decode: { data in try decoder().decode(Value.self, from: data) },
      encode: { value in try encoder().encode(value) })
  }
}

extension ValueTransform where Stored == Data, Value == String {
  /// Text: `Data` holding a string in `encoding` (UTF-8 by default). Bytes that are not valid
  /// in the encoding, or a string the encoding cannot represent, fail with
  /// ``AsyncCacheError/Code/transformFailed``.
  public static func string(encoding: String.Encoding = .utf8) -> ValueTransform {
    ValueTransform(
      decode: { data in
        guard let string = String(data: data, encoding: encoding) else {
          throw AsyncCacheError(
            code: .transformFailed, message: "\(data.count) bytes are not valid text in encoding \(encoding)")
        }
        return string
      },
      encode: { string in
        guard let data = string.data(using: encoding) else {
          throw AsyncCacheError(
            code: .transformFailed, message: "a string of \(string.count) characters cannot be encoded in \(encoding)")
        }
        return data
      })
  }
}
