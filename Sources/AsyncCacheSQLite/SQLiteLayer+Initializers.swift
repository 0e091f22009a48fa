public import AsyncCache
public import Foundation

extension SQLiteLayer where Key: CacheKeyEncodable, Value == Data {
  /// Opens a layer of raw `Data` values whose keys are stored with their type's default
  /// encoding (`CacheKeyEncodable`: `String`, integers, `UUID`, …). See
  /// ``init(url:namespace:configuration:keyEncoding:valueCoder:)``.
  public init(url: URL, namespace: String = "default", configuration: Configuration = Configuration())
    async throws
  {
    try await self.init(
      url: url, namespace: namespace, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: .data
    )
  }
}

extension SQLiteLayer where Key: CacheKeyEncodable, Value: Codable {
  /// Opens a layer of `Codable` values, stored as JSON unless another coder is given, whose keys
  /// are stored with their type's default encoding (`CacheKeyEncodable`: `String`, integers,
  /// `UUID`, …): `SQLiteLayer<Int, Product>(url: url)`. See
  /// ``init(url:namespace:configuration:keyEncoding:valueCoder:)``.
  public init(
    url: URL,
    namespace: String = "default",
    configuration: Configuration = Configuration(),
    valueCoder: CacheValueCoder<Value> = .json
  ) async throws {
    try await self.init(
      url: url, namespace: namespace, configuration: configuration, keyEncoding: Key.cacheKeyEncoding,
      valueCoder: valueCoder)
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
