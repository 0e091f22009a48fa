import Foundation
import Testing

@testable import PersistenceTestSupport

/// Finding the `PersistenceProbe` executable that the process tests start.
@Suite("Probe")
struct ProbeTests {
  /// A products directory with a test bundle and an executable probe in it, laid out as SwiftPM
  /// lays out `.build/<triple>/debug`.
  struct Products {
    let folder: TemporaryDirectory
    let directory: URL
    let probe: URL

    init(testProduct: String) throws {
      folder = try TemporaryDirectory()
      directory = folder.appending(".build/arm64-apple-macosx/debug")
      let manager = FileManager.default
      try manager.createDirectory(
        at: directory.appendingPathComponent(testProduct).appendingPathComponent("Contents/MacOS"),
        withIntermediateDirectories: true)
      probe = directory.appendingPathComponent("PersistenceProbe")
      #expect(manager.createFile(atPath: probe.path, contents: Data(), attributes: [.posixPermissions: 0o755]))
    }
  }

  @Test(
    "on macOS it is beside the test bundle, though xctest or swiftpm-testing-helper runs the tests from the toolchain")
  func besideTheTestBundle() throws {
    let products = try Products(testProduct: "swift-async-cachePackageTests.xctest")
    defer { products.folder.remove() }
    let toolchain = products.folder.appending("Xcode.app/Contents/Developer/usr/libexec/swift/pm")
    try FileManager.default.createDirectory(at: toolchain, withIntermediateDirectories: true)

    let directories = Probe.searchDirectories(
      testBundle: products.directory.appendingPathComponent("swift-async-cachePackageTests.xctest"),
      mainBundle: toolchain, firstArgument: toolchain.appendingPathComponent("swiftpm-testing-helper").path)
    #expect(Probe.executable(in: directories)?.standardizedFileURL == products.probe.standardizedFileURL)
    // Without the test bundle's directory, as the search was: nothing.
    #expect(Probe.executable(in: Array(directories.dropFirst())) == nil)
  }

  @Test("on Linux it is beside the test executable, which is the main bundle and argv[0]")
  func besideTheTestExecutable() throws {
    let products = try Products(testProduct: "swift-async-cachePackageTests.xctest")
    defer { products.folder.remove() }
    let executable = products.directory.appendingPathComponent("swift-async-cachePackageTests.xctest")
    let directories = Probe.searchDirectories(
      testBundle: executable, mainBundle: products.directory, firstArgument: executable.path)
    #expect(Probe.executable(in: directories)?.standardizedFileURL == products.probe.standardizedFileURL)
  }

  @Test("a directory without an executable probe is passed over")
  func notExecutable() throws {
    let products = try Products(testProduct: "Tests.xctest")
    defer { products.folder.remove() }
    try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: products.probe.path)
    #expect(Probe.executable(in: [products.directory]) == nil)
  }

  @Test("this build's probe is found", .enabled(if: Probe.unavailableReason == nil))
  func thisBuild() throws {
    let probe = try Probe.executable()
    #expect(FileManager.default.isExecutableFile(atPath: probe.path))
    #expect(probe.lastPathComponent == "PersistenceProbe")
  }
}
