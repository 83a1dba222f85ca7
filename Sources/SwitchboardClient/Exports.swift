// The wire types the client's API takes and returns (requests and responses, `MetadataItem`, `ChannelType`,
// `Push` and the push payloads, `Welcome`, `ErrorCode`, ...) live in SwitchboardWire. Re-exporting the module
// lets an app write `import SwitchboardClient` alone.
@_exported import SwitchboardWire
