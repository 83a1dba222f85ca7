// This file imports SwitchboardClient and nothing else of the project: the wire types the client's API takes and
// returns must come with it (the target also builds with MemberImportVisibility on).
import SwitchboardClient
import Testing

/// What an app that writes `import SwitchboardClient` alone can use.
@Suite struct SingleImportTests {
    @Test func theWireTypesOfTheClientAPIAreUsableWithTheClientImportAlone() {
        let item = MetadataItem(key: "status", value: "away")
        let request = Request.setChannelMetadata(
            SetChannelMetadataRequest(channel: "lobby", channelType: .message, items: [item]))
        #expect(request.operation == .setChannelMetadata)
        let options = ChannelSubscriptionOptions(withMetadata: true, withLock: true)
        #expect(options.withMetadata && options.withLock && options.withPresence && !options.beQuiet)

        let push = Push.storageEvent(
            StorageEvent(storageType: .channel, eventType: .set, target: "lobby", channelType: .stream, items: [item]))
        guard case .storageEvent(let event) = push else {
            Issue.record("not a storage event: \(push)")
            return
        }
        #expect(event.channelType == .stream && event.items.first?.value == "away")
    }

    @Test func aServerErrorBodyBecomesAClientErrorWithTheSpecCodeAndRetryDelay() {
        let body = ErrorBody(code: UInt64(ErrorCode.rateLimited.rawValue), message: "slow down", retryAfterMs: 250)
        let error = SwitchboardClientError(response: body)
        #expect(error.code == .rateLimited)
        #expect(error.errorClass == .limits)
        #expect(error.kind == .server)
        #expect(error.retryAfter == .milliseconds(250))
    }

    @Test func theConfigurationAndReconnectPolicyTakeDurations() {
        var configuration = ClientConfiguration(endpoint: .tcp(host: "127.0.0.1", port: 7400), userID: "tony")
        #expect(configuration.requestTimeout == .seconds(30))
        #expect(configuration.connectTimeout == .seconds(10))
        #expect(configuration.heartbeatInterval == nil)
        configuration.heartbeatInterval = .milliseconds(1_500)
        configuration.requestTimeout = .milliseconds(2_500)
        #expect(configuration.heartbeatInterval == .milliseconds(1_500) && configuration.requestTimeout < .seconds(3))
        let policy = ReconnectPolicy(initialDelay: .milliseconds(100), multiplier: 2, maxDelay: .seconds(1), jitter: 0)
        #expect(policy.delay(forAttempt: 3) == .milliseconds(400))
        #expect(policy.delay(forAttempt: 10) == .seconds(1))
    }
}
