/// Where a load found its value.
@usableFromInline
enum LoadSource: Hashable, Sendable {
  /// The layer at this index of the chain had it.
  case layer(Int)
  /// The origin returned it.
  case origin
}

/// Something waiting for a load: a request, which wants the value, or a prefetch, which wants
/// to know where the value came from.
@usableFromInline
enum LoadWaiter<Value: Sendable>: Sendable {
  case request(UnsafeContinuation<Value, any Error>)
  case prefetch(UnsafeContinuation<LoadSource, any Error>)

  @inlinable
  func resume(with result: Result<(Value, LoadSource), any Error>) {
    switch self {
    case .request(let continuation): continuation.resume(with: result.map(\.0))
    case .prefetch(let continuation): continuation.resume(with: result.map(\.1))
    }
  }

  @inlinable
  func resume(throwing error: any Error) {
    switch self {
    case .request(let continuation): continuation.resume(throwing: error)
    case .prefetch(let continuation): continuation.resume(throwing: error)
    }
  }
}
