import SwitchboardStore

/// The wall clock in milliseconds since the Unix epoch (the gateway's `systemNowMillis`, without the server module).
@Sendable
func systemNowMillis() -> Int64 {
    Int64(StoreClock.system.nowMs())
}
