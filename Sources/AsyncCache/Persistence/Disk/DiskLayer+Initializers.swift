public import Foundation

extension DiskLayer where Key: CacheKeyEncodable {
  /// Opens a disk layer whose keys are stored with their type's default encoding
  /// (``CacheKeyEncodable``: `String`, integers, `UUID`, …).
  ///
  /// Costs what ``init(directory:configuration:keyEncoding:valueCoder:)`` costs.
  ///
  /// - Parameters:
  ///   - directory: A file URL of the directory to keep the files in.
  ///   - configuration: Limits, expiry and clock.
  ///   - valueCoder: How values become bytes.
  /// - Throws: What ``init(directory:configuration:keyEncoding:valueCoder:)`` throws.
  public init(
    directory: URL, configuration: Configuration = Configuration(), valueCoder: CacheValueCoder<Value>
  ) async throws {
    try await self.init(
      directory: directory, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: valueCoder)
  }
}

extension DiskLayer where Value == Data {
  /// Opens a disk layer with `Data` values, stored as they are.
  ///
  /// Costs what ``init(directory:configuration:keyEncoding:valueCoder:)`` costs.
  ///
  /// - Parameters:
  ///   - directory: A file URL of the directory to keep the files in.
  ///   - configuration: Limits, expiry and clock.
  ///   - keyEncoding: How keys become the strings stored in the files; must be injective.
  /// - Throws: What ``init(directory:configuration:keyEncoding:valueCoder:)`` throws.
  public init(
    directory: URL, configuration: Configuration = Configuration(), keyEncoding: CacheKeyEncoding<Key>
  ) async throws {
    try await self.init(
      directory: directory, configuration: configuration, keyEncoding: keyEncoding, valueCoder: .data)
  }
}

extension DiskLayer where Key: CacheKeyEncodable, Value == Data {
  /// Opens a disk layer of `Data` values, stored as they are, whose keys are stored with their
  /// type's default encoding (``CacheKeyEncodable``).
  ///
  /// Costs what ``init(directory:configuration:keyEncoding:valueCoder:)`` costs.
  ///
  /// - Parameters:
  ///   - directory: A file URL of the directory to keep the files in.
  ///   - configuration: Limits, expiry and clock.
  /// - Throws: What ``init(directory:configuration:keyEncoding:valueCoder:)`` throws.
  public init(directory: URL, configuration: Configuration = Configuration()) async throws {
    try await self.init(
      directory: directory, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: .data)
  }
}

extension DiskLayer where Value: Codable {
  /// Opens a disk layer with `Codable` values, stored as JSON.
  ///
  /// Costs what ``init(directory:configuration:keyEncoding:valueCoder:)`` costs.
  ///
  /// - Parameters:
  ///   - directory: A file URL of the directory to keep the files in.
  ///   - configuration: Limits, expiry and clock.
  ///   - keyEncoding: How keys become the strings stored in the files; must be injective.
  /// - Throws: What ``init(directory:configuration:keyEncoding:valueCoder:)`` throws.
  public init(
    directory: URL, configuration: Configuration = Configuration(), keyEncoding: CacheKeyEncoding<Key>
  ) async throws {
    try await self.init(
      directory: directory, configuration: configuration, keyEncoding: keyEncoding, valueCoder: .json)
  }
}

extension DiskLayer where Key: CacheKeyEncodable, Value: Codable {
  /// Opens a disk layer whose keys are stored with their type's default encoding
  /// (``CacheKeyEncodable``), and `Codable` values, stored as
  /// JSON.
  ///
  /// Costs what ``init(directory:configuration:keyEncoding:valueCoder:)`` costs.
  ///
  /// - Parameters:
  ///   - directory: A file URL of the directory to keep the files in.
  ///   - configuration: Limits, expiry and clock.
  /// - Throws: What ``init(directory:configuration:keyEncoding:valueCoder:)`` throws.
  public init(directory: URL, configuration: Configuration = Configuration()) async throws {
    try await self.init(
      directory: directory, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: .json)
  }
}
