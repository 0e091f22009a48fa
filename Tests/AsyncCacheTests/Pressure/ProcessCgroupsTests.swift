import Testing

@testable import AsyncCache

@Suite("ProcessCgroups")
struct ProcessCgroupsTests {
  @Test("a cgroup v2 line names the unified group, the memory controller's line the v1 group")
  func hierarchies() {
    let hybrid = ProcessCgroups(
      parsing: """
        9:name=systemd:/
        4:memory:/process_api/7d355e4e
        1:cpu:/
        0::/

        """)
    #expect(hybrid.unified == .path([]))
    #expect(hybrid.memory == .path(["process_api", "7d355e4e"]))
    #expect(hybrid.malformedLineCount == 0 && hybrid.firstMalformedLine == nil)

    let unifiedOnly = ProcessCgroups(parsing: "0::/system.slice/app.service\n")
    #expect(unifiedOnly.unified == .path(["system.slice", "app.service"]))
    #expect(unifiedOnly.memory == nil)

    let v1Only = ProcessCgroups(parsing: "7:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    #expect(v1Only.unified == nil)
    #expect(v1Only.memory == .path(["docker", "abc"]))
  }

  @Test(
    "the memory controller is found in a list of controllers, and only by its exact name",
    arguments: [
      ("4:cpu,memory:/job", ProcessCgroups.Group?.some(.path(["job"]))),
      ("4:memory,cpu:/job", .path(["job"])),
      ("4:memoryx:/job", nil),
      ("1:name=memory:/job", nil),
      ("0:memory:/job", .path(["job"])),
    ])
  func memoryController(line: String, memory: ProcessCgroups.Group?) {
    let cgroups = ProcessCgroups(parsing: line)
    #expect(cgroups.memory == memory)
    #expect(cgroups.unified == nil, "a line with controllers is not the unified hierarchy")
  }

  @Test(
    "a path is split into components: colons kept, empty components dropped",
    arguments: [
      ("0::/", [String]()),
      ("0::/a:b/c", ["a:b", "c"]),
      ("0::/a//b/", ["a", "b"]),
      ("0::/app.service (deleted)", ["app.service (deleted)"]),
    ])
  func components(line: String, components: [String]) {
    #expect(ProcessCgroups(parsing: line).unified == .path(components))
  }

  @Test(
    "a relative path, or one with . or .. (a group outside the cgroup namespace), cannot be followed",
    arguments: ["0::/../../system.slice/x.scope", "0::/a/./b", "0::relative", "0::"])
  func unreachable(line: String) {
    let written = String(line.dropFirst(3))
    #expect(ProcessCgroups(parsing: line).unified == .unreachable(written))
  }

  @Test("the first line of a hierarchy counts")
  func firstLineCounts() {
    let cgroups = ProcessCgroups(parsing: "0::/first\n0::/second\n7:memory:/one\n8:memory:/two\n")
    #expect(cgroups.unified == .path(["first"]))
    #expect(cgroups.memory == .path(["one"]))
  }

  @Test("lines that are not id:controllers:path are counted and ignored; blank lines are not counted")
  func malformedLines() {
    let cgroups = ProcessCgroups(
      parsing: "garbage\n\n  \n0:/two-fields\n:memory:/no-id\nx:memory:/letters\n-1::/negative\n0::/kept\n")
    #expect(cgroups.malformedLineCount == 5)
    #expect(cgroups.firstMalformedLine == "garbage")
    #expect(cgroups.unified == .path(["kept"]))
    #expect(cgroups.memory == nil)

    let long = ProcessCgroups(parsing: String(repeating: "x", count: 500))
    #expect(long.firstMalformedLine == String(repeating: "x", count: 80))

    let binary = ProcessCgroups(parsing: String(decoding: [0, 1, 0xFF, 0x3A, 0x0A, 0xFE], as: UTF8.self))
    #expect(binary.unified == nil && binary.memory == nil && binary.malformedLineCount == 2)

    let empty = ProcessCgroups(parsing: "")
    #expect(empty == ProcessCgroups(parsing: "\n\n"))
    #expect(empty.unified == nil && empty.memory == nil && empty.malformedLineCount == 0)
  }
}
