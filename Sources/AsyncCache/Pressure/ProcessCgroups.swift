/// The control groups of the process, as `/proc/self/cgroup` lists them: one line per
/// hierarchy, `hierarchy-ID:controller-list:path`.
///
/// Each path is relative to the root of its hierarchy as the process's cgroup namespace sees
/// it: `/` in a container with a namespace of its own, whose group is then the root of the
/// mount; `/system.slice/app.service` for a systemd service; paths that start with `/..` for
/// a group outside the namespace. Parsing is pure (no I/O) and never fails: a line that is not
/// `id:controllers:path` is counted and otherwise ignored.
struct ProcessCgroups: Sendable, Hashable {
  /// A group named by a line.
  enum Group: Sendable, Hashable {
    /// A group below the root of the hierarchy, as its path's components: `[]` for the root.
    case path([String])
    /// A path that cannot be followed down from the root the process sees: relative, or with
    /// `.` or `..` components (a group outside the process's cgroup namespace). The value is the
    /// path as written.
    case unreachable(String)
  }

  /// The group in the cgroup v2 hierarchy, from the line `0::/path`; `nil` without one.
  var unified: Group?
  /// The group in the cgroup v1 hierarchy of the memory controller, from a line such as
  /// `7:memory:/path` (the controller may share it: `4:cpu,memory:/path`); `nil` without one.
  var memory: Group?
  /// The lines that are not `id:controllers:path` (blank lines are not counted).
  var malformedLineCount: Int
  /// The first of those lines, at most 80 characters, for a log.
  var firstMalformedLine: String?

  /// Parses the text of `/proc/self/cgroup`. When a hierarchy has several lines, the first
  /// counts.
  init(parsing text: String) {
    unified = nil
    memory = nil
    malformedLineCount = 0
    firstMalformedLine = nil
    for line in text.split(separator: "\n") where !line.allSatisfy(\.isWhitespace) {
      // The path may itself contain colons: split at the first two only.
      let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
      guard fields.count == 3, !fields[0].isEmpty, fields[0].allSatisfy({ $0.isASCII && $0.isNumber }) else {
        malformedLineCount += 1
        if firstMalformedLine == nil { firstMalformedLine = String(line.prefix(80)) }
        continue
      }
      if fields[0] == "0" && fields[1].isEmpty {
        if unified == nil { unified = Self.group(fields[2]) }
      } else if fields[1].split(separator: ",").contains("memory") {
        if memory == nil { memory = Self.group(fields[2]) }
      }
    }
  }

  private static func group(_ path: Substring) -> Group {
    guard path.hasPrefix("/") else { return .unreachable(String(path)) }
    let components = path.split(separator: "/")
    guard !components.contains(where: { $0 == "." || $0 == ".." }) else { return .unreachable(String(path)) }
    return .path(components.map(String.init))
  }
}
