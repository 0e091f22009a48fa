/// One message the framework logs: its level, text, metadata and where it comes from.
///
/// The framework builds a record only when a ``CacheLogger`` has a handler and the level is at
/// least its minimum; then it passes it to ``CacheLogHandler/log(_:)``.
public struct CacheLogRecord: Sendable, Hashable, CustomStringConvertible {
  /// How severe the event is.
  public var level: CacheLogLevel
  /// A sentence describing the event, such as `"layer 1 (DiskLayer) failed during lookup; skipped"`.
  public var message: String
  /// Details, by name: `key`, `layer`, `tier`, `operation`, `attempt`, `delay`, `error`, …
  /// (the <doc:CacheLogging> article lists them). Values are already strings, cut at a few hundred
  /// characters; keys are described with `String(describing:)`.
  public var metadata: [String: String]
  /// The component that logged: `"LoadingCache"`, `"CacheChain"`, `"AsyncPrefetcher"`,
  /// `"DiskLayer"`, `"UserDefaultsLayer"`, `"SQLiteLayer"`, `"LinuxMemoryPressureSource"`; for
  /// your own calls, the name you pass or your module's name.
  public var source: String
  /// The file that logged, as `#fileID` spells it (`Module/File.swift`).
  public var file: String
  /// The function that logged.
  public var function: String
  /// The line that logged.
  public var line: UInt

  /// Creates a record.
  ///
  /// - Parameters:
  ///   - level: How severe the event is.
  ///   - message: A sentence describing it.
  ///   - metadata: Details, by name.
  ///   - source: The component that logged.
  ///   - file: The file that logged, as `#fileID` spells it.
  ///   - function: The function that logged.
  ///   - line: The line that logged.
  public init(
    level: CacheLogLevel,
    message: String,
    metadata: [String: String] = [:],
    source: String,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    self.level = level
    self.message = message
    self.metadata = metadata
    self.source = source
    self.file = file
    self.function = function
    self.line = line
  }

  /// The record on one line, for `print`: `warning CacheChain: <message> [key=42, layer=DiskLayer]`,
  /// metadata sorted by name.
  public var description: String {
    var text = "\(level) \(source): \(message)"
    if !metadata.isEmpty {
      text += " [" + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ") + "]"
    }
    return text
  }
}
