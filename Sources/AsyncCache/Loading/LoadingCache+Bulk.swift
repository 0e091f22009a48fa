extension LoadingCache {
  /// The outcome of a bulk request: the values found or loaded, and the keys that failed.
  public struct BulkValues: Sendable {
    /// The values found in the layers or loaded, by key.
    public var values: [Key: Value]
    /// The error of each key that could not be loaded (`CancellationError` for keys left
    /// unloaded because the request was cancelled).
    public var failures: [Key: any Error]

    /// Creates an outcome.
    public init(values: [Key: Value] = [:], failures: [Key: any Error] = [:]) {
      self.values = values
      self.failures = failures
    }
  }

  /// Returns the values of `keys` that could be found or loaded, and the error of each one that
  /// could not: one key's failure does not fail the others.
  ///
  /// Keys held by the top memory layer are answered at once; the others are requested at the
  /// same time, each as ``value(for:)`` would: a key already loading joins that load, and a
  /// request for it that arrives meanwhile joins this one. Duplicate keys are asked once.
  /// Cancelling the calling task cancels the requests still waiting; their keys fail with
  /// `CancellationError`. Safe from any context.
  public func values(for keys: some Sequence<Key>) async -> BulkValues {
    var result = BulkValues()
    let missing = partition(keys, into: &result.values)
    guard !missing.isEmpty else { return result }
    await withTaskGroup(of: (Key, Result<Value, any Error>).self) { group in
      for key in missing {
        group.addTask {
          do {
            return (key, .success(try await self.value(for: key)))
          } catch {
            return (key, .failure(error))
          }
        }
      }
      for await (key, outcome) in group {
        switch outcome {
        case .success(let value): result.values[key] = value
        case .failure(let error): result.failures[key] = error
        }
      }
    }
    return result
  }

  /// Returns the values of all `keys`, or throws the first error: the requests still waiting
  /// are then cancelled (a load shared with other requests goes on for them).
  ///
  /// Keys are requested as in ``values(for:)``. Safe from any context.
  ///
  /// - Throws: The first error of a key's load, or `CancellationError` when the calling task is
  ///   cancelled.
  public func allValues(for keys: some Sequence<Key>) async throws -> [Key: Value] {
    var values: [Key: Value] = [:]
    let missing = partition(keys, into: &values)
    guard !missing.isEmpty else { return values }
    try await withThrowingTaskGroup(of: (Key, Value).self) { group in
      for key in missing {
        group.addTask { (key, try await self.value(for: key)) }
      }
      do {
        for try await (key, value) in group { values[key] = value }
      } catch {
        group.cancelAll()
        throw error
      }
    }
    return values
  }

  /// Puts the values of `keys` held by the top memory layer into `values`; returns the other
  /// keys, each once, in order.
  private func partition(_ keys: some Sequence<Key>, into values: inout [Key: Value]) -> [Key] {
    var missing: [Key] = []
    var seen = Set<Key>()
    for key in keys where seen.insert(key).inserted {
      if let value = cachedValue(for: key) { values[key] = value } else { missing.append(key) }
    }
    return missing
  }
}
