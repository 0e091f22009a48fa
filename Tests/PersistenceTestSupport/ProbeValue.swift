public import Foundation

/// Values whose every byte derives from their key and version, so that a reader can tell one
/// whole version from a torn or mixed one.
public enum ProbeValue {
  /// A value of `size` bytes (at least 16): the version, the size, then a pattern seeded by
  /// both and the key.
  public static func make(key: String, version: Int, size: Int) -> Data {
    var data = Data(count: max(size, 16))
    data.withUnsafeMutableBytes { bytes in
      bytes.storeBytes(of: UInt64(version).littleEndian, toByteOffset: 0, as: UInt64.self)
      bytes.storeBytes(of: UInt64(bytes.count).littleEndian, toByteOffset: 8, as: UInt64.self)
      var state = seed(key: key, version: version)
      for index in 16..<bytes.count {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        bytes[index] = UInt8(truncatingIfNeeded: state >> 56)
      }
    }
    return data
  }

  /// The version of `data` if it is exactly one whole value written for `key`, or `nil`.
  public static func version(of data: Data, key: String) -> Int? {
    guard data.count >= 16 else { return nil }
    let version = data.withUnsafeBytes { Int(UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self))) }
    let size = data.withUnsafeBytes { Int(UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))) }
    guard size == data.count, version > 0 else { return nil }
    return make(key: key, version: version, size: size) == data ? version : nil
  }

  private static func seed(key: String, version: Int) -> UInt64 {
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325
    for byte in key.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
    return hash ^ UInt64(version) &* 0x9E37_79B9_7F4A_7C15
  }
}
