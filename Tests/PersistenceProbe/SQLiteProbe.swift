/// The probe's commands that exercise `SQLiteLayer`.
enum SQLiteProbe {
  static let commands: [String: @Sendable ([String]) async -> Int32] = [:]
}
