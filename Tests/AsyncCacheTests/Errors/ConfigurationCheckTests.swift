import AsyncCache
import Foundation
import Testing

@Suite("ConfigurationCheck: one wording for every configuration's errors")
struct ConfigurationCheckTests {
  let check = ConfigurationCheck("DiskLayer")

  func message(_ body: () throws -> Void) -> String? {
    do {
      try body()
      return nil
    } catch {
      let error = error as? AsyncCacheError
      #expect(error?.code == .invalidConfiguration)
      return error?.message
    }
  }

  @Test("each check names the component, the setting, its value and the rule")
  func messages() {
    #expect(message { try check.requirePositive("sizeLimit", 0) } == "DiskLayer sizeLimit is 0; it must be positive")
    #expect(message { try check.requirePositive("countLimit", nil as Int?) } == nil, "unset passes")
    #expect(
      message { try check.requireNotNegative("costLimit", -1) } == "DiskLayer costLimit is -1; it must be 0 or more")
    #expect(
      message { try check.requirePositive("timeToLive", Duration.zero) }
        == "DiskLayer timeToLive is \(Duration.zero.readable); it must be positive")
    #expect(message { try check.requirePositive("timeToLive", nil as Duration?) } == nil)
    #expect(
      message { try check.requireNotNegative("busyTimeout", .seconds(-1)) }
        == "DiskLayer busyTimeout is \(Duration.seconds(-1).readable); it must be zero or more")
    #expect(
      message { try check.require(false, "maximumEntrySize", is: "9", mustBe: "in 1...sizeLimit (8)") }
        == "DiskLayer maximumEntrySize is 9; it must be in 1...sizeLimit (8)")
    #expect(message { try check.require(true, "maximumEntrySize", is: "9", mustBe: "anything") } == nil)
    #expect(check.invalid("a username needs a password").message == "DiskLayer: a username needs a password")
  }

  @Test("the layers' configurations word their errors through it")
  func layers() {
    #expect(
      message { _ = try MemoryLayer<String, Int>(configuration: .init(countLimit: -1)) }
        == "MemoryLayer countLimit is -1; it must be 0 or more")
    #expect(
      message { _ = try MemoryLayer<String, Int>(configuration: .init(segmentCount: 3)) }
        == "MemoryLayer segmentCount is 3; it must be a power of two in 1...256")
    #expect(
      message { _ = try UserDefaultsLayer<String, Data>(suiteName: "s", configuration: .init(maximumEntrySize: 0)) }
        == "UserDefaultsLayer maximumEntrySize is 0; it must be positive")
  }

  @Test("a disk layer's configuration is checked before its directory is touched")
  func disk() async {
    await #expect {
      _ = try await DiskLayer<String, Data>(
        directory: URL(fileURLWithPath: "/nonexistent/\(UUID())"), configuration: .init(sizeLimit: 0),
        keyEncoding: .string, valueCoder: .data)
    } throws: { error in
      (error as? AsyncCacheError)?.message == "DiskLayer sizeLimit is 0; it must be positive"
    }
  }
}
