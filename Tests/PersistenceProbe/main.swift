// A child process for the persistence tests. Each command prints one line per step, so that
// the parent waits for lines instead of sleeping, and kills it at a step it chooses.
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
  FileHandle.standardError.write(Data("usage: PersistenceProbe <command> [arguments]\n".utf8))
  exit(64)
}
let rest = Array(arguments.dropFirst())
let status: Int32
if let run = SQLiteProbe.commands[command] {
  status = await run(rest)
} else if let run = DiskProbe.commands[command] {
  status = await run(rest)
} else if let run = RedisProbe.commands[command] {
  status = await run(rest)
} else if let run = ProcessProbe.commands[command] {
  status = await run(rest)
} else {
  FileHandle.standardError.write(Data("PersistenceProbe: unknown command \(command)\n".utf8))
  status = 64
}
exit(status)

/// Prints a line to standard output at once (unbuffered), for the parent to wait on.
@Sendable func emit(_ line: String) {
  FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
