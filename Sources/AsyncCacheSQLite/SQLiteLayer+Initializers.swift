public import AsyncCache
public import Foundation

extension SQLiteLayer where Key == String, Value == Data {
  /// Opens a layer of string keys and raw `Data` values. See
  /// ``init(url:namespace:configuration:keyEncoding:valueCoder:)``.
  public init(url: URL, namespace: String = "default", configuration: Configuration = Configuration())
    async throws
  {
    try await self.init(
      url: url, namespace: namespace, configuration: configuration, keyEncoding: .string, valueCoder: .data)
  }
}

extension SQLiteLayer where Key == String, Value: Codable {
  /// Opens a layer of string keys and `Codable` values, stored as JSON unless another coder
  /// is given. See ``init(url:namespace:configuration:keyEncoding:valueCoder:)``.
  public init(
    url: URL,
    namespace: String = "default",
    configuration: Configuration = Configuration(),
    valueCoder: CacheValueCoder<Value> = .json
  ) async throws {
    try await self.init(
      url: url, namespace: namespace, configuration: configuration, keyEncoding: .string, valueCoder: valueCoder)
  }
}

extension SQLiteLayer where Value == Data {
  /// Opens a layer of raw `Data` values under keys of any type. See
  /// ``init(url:namespace:configuration:keyEncoding:valueCoder:)``.
  public init(
    url: URL,
    namespace: String = "default",
    configuration: Configuration = Configuration(),
    keyEncoding: CacheKeyEncoding<Key>
  ) async throws {
    try await self.init(
      url: url, namespace: namespace, configuration: configuration, keyEncoding: keyEncoding, valueCoder: .data)
  }
}
