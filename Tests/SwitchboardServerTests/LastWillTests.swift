import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// Last wills (`setWill`, `getWill`, `Protocol/SPEC.md` §13.10) over real sockets, on a full gateway with its SQLite
/// files: a session that drops runs its will as its user; logout does not; a delayed will waits, and a user who comes
/// back in time cancels it; actions are checked when registered (operation, limits, grants) and again, with their
/// compare-and-set checks, when they run; the client registers its will again after a reconnect.
@Suite struct LastWillTests {
    static let status = WillAction(
        operation: UInt64(Opcode.setUserMetadata.rawValue),
        items: [MetadataItem(key: "status", value: "offline")], recordUserId: true)

    static func setWill(
        _ connection: SwitchboardConnection, _ actions: [WillAction], delaySeconds: UInt64 = 0
    ) async throws -> UInt64 {
        let response = try await connection.send(.setWill(SetWillRequest(actions: actions, delaySeconds: delaySeconds)))
        guard case .setWill(let body) = response else { throw TestFailure("unexpected \(response)") }
        return body.actions
    }

    /// The items of `user`'s metadata, by key, as `reader` reads them.
    static func metadata(of user: String, _ reader: SwitchboardConnection) async throws -> [String: MetadataItem] {
        let response = try await reader.send(.getUserMetadata(GetUserMetadataRequest(userId: user)))
        guard case .getUserMetadata(let body) = response else { throw TestFailure("unexpected \(response)") }
        return Dictionary(body.items.map { ($0.key, $0) }, uniquingKeysWith: { $1 })
    }

    @Test("a session that drops without logging out runs its will at once, as its user: metadata written, an event published")
    func aDroppedSessionRunsItsWillAtOnce() async throws {
        try await withFullGateway { gateway in
            let ann = try await gateway.connect(.unix, user: "ann")
            let annPushes = PushLog(ann)
            _ = try await ann.send(.subscribeEvent(SubscribeEventRequest(expirySeconds: 3_600, publishers: ["tony"])))
            let tony = try await gateway.connect(.tcp, user: "tony")
            _ = try await tony.send(.setUserMetadata(SetUserMetadataRequest(items: [MetadataItem(key: "status", value: "online")])))
            let published = WillAction(operation: UInt64(Opcode.publishEvent.rawValue), value: 10_042, ext: "gone")
            #expect(try await Self.setWill(tony, [Self.status, published]) == 2)
            let read = try await tony.send(.getWill(EmptyBody()))
            #expect(read == .getWill(GetWillResponse(actions: [Self.status, published], delaySeconds: 0)))

            await tony.close()  // no logout: an abnormal end

            #expect(try await eventually { try await Self.metadata(of: "tony", ann)["status"]?.value == "offline" })
            let item = try #require(try await Self.metadata(of: "tony", ann)["status"])
            #expect(item.authorUserId == "tony" && item.revision == 2)
            #expect(await annPushes.wait(seconds: 10) { pushes in
                pushes.contains { push in
                    guard case .subscribedEvents(let batch) = push else { return false }
                    return batch.events.contains { $0.publisher == "tony" && $0.value == 10_042 && $0.ext == "gone" }
                }
            })
        }
    }

    @Test("logout does not run the will; a cleared will does not run either")
    func logoutAndAClearedWillDoNotRun() async throws {
        try await withFullGateway { gateway in
            let ann = try await gateway.connect(.unix, user: "ann")
            let tony = try await gateway.connect(.tcp, user: "tony")
            _ = try await Self.setWill(tony, [Self.status])
            _ = try await tony.send(.logout(EmptyBody()))

            let bob = try await gateway.connect(.tcp, user: "bob")
            _ = try await Self.setWill(bob, [Self.status])
            #expect(try await Self.setWill(bob, []) == 0)  // cleared
            #expect(try await bob.send(.getWill(EmptyBody())) == .getWill(GetWillResponse()))
            await bob.close()

            // A control will, registered after the others, runs: once it has, the others would have too.
            let carl = try await gateway.connect(.tcp, user: "carl")
            _ = try await Self.setWill(carl, [Self.status])
            await carl.close()
            #expect(try await eventually { try await Self.metadata(of: "carl", ann)["status"]?.value == "offline" })
            try await Task.sleep(for: .milliseconds(200))
            #expect(try await Self.metadata(of: "tony", ann).isEmpty)
            #expect(try await Self.metadata(of: "bob", ann).isEmpty)
        }
    }

    @Test("a delayed will is cancelled by a session of the same user that starts in time, and runs when none does")
    func aDelayedWillWaitsAndIsCancelledByTheUserComingBack() async throws {
        try await withFullGateway { gateway in
            /// Waits until the gateway has handled the end of tony's dropped session: its will waits out its delay
            /// (a loaded machine notices a closed socket late, and the delay starts then; a session of tony that
            /// started before that is not "meanwhile", SB-13.10-4).
            let wills = try #require(gateway.services?.wills)
            func tonysWillWaits() async -> Bool {
                await eventually { wills.counts.pending == 1 }
            }
            let ann = try await gateway.connect(.unix, user: "ann")
            let first = try await gateway.connect(.tcp, user: "tony", device: "phone")
            // 4 s: the user's return must come within the delay, and a loaded machine takes over a second to connect.
            _ = try await Self.setWill(first, [Self.status], delaySeconds: 4)
            await first.close()
            #expect(await tonysWillWaits())
            // Back within the delay, from another device, and gone again (logged out) before the delay is up: the
            // will was cancelled when the user came back.
            let visit = try await gateway.connect(.tcp, user: "tony", device: "laptop")
            _ = try await visit.send(.logout(EmptyBody()))
            try await Task.sleep(for: .milliseconds(4_300))
            #expect(try await Self.metadata(of: "tony", ann)["status"] == nil)

            // A delay that ends while the user is online on another device: not run either.
            let phone = try await gateway.connect(.tcp, user: "tony", device: "phone")
            let laptop = try await gateway.connect(.tcp, user: "tony", device: "laptop")
            _ = try await Self.setWill(phone, [Self.status], delaySeconds: 2)
            await phone.close()
            #expect(await tonysWillWaits())
            try await Task.sleep(for: .milliseconds(2_300))
            #expect(try await Self.metadata(of: "tony", ann)["status"] == nil)

            // This time nobody comes back: the will runs about a second after the drop, not before.
            let second = laptop
            _ = try await Self.setWill(second, [Self.status], delaySeconds: 1)
            await second.close()
            #expect(await tonysWillWaits())
            let dropped = ContinuousClock.now
            #expect(try await eventually { try await Self.metadata(of: "tony", ann)["status"]?.value == "offline" })
            #expect(ContinuousClock.now - dropped >= .milliseconds(800))
        }
    }

    @Test("a will's compare-and-set check is made when it runs: a stale action fails and the next one still runs")
    func compareAndSetIsCheckedWhenTheWillRuns() async throws {
        try await withFullGateway { gateway in
            let ann = try await gateway.connect(.unix, user: "ann")
            let tony = try await gateway.connect(.tcp, user: "tony")
            _ = try await tony.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "owner", value: "tony")])))
            // Clear the owner only if nobody changed the room since (majorRevision 1); then note the leave.
            let clearOwner = WillAction(
                operation: UInt64(Opcode.removeChannelMetadata.rawValue), channel: "room",
                items: [MetadataItem(key: "owner")], majorRevision: 1)
            let note = WillAction(
                operation: UInt64(Opcode.updateChannelMetadata.rawValue), channel: "lobby",
                items: [MetadataItem(key: "note", value: "tony left")])
            _ = try await ann.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "lobby", items: [MetadataItem(key: "note", value: "")])))
            _ = try await Self.setWill(tony, [clearOwner, note])
            // Ann takes the room over before tony drops: the will's check no longer holds.
            _ = try await ann.send(
                .setChannelMetadata(SetChannelMetadataRequest(channel: "room", items: [MetadataItem(key: "owner", value: "ann")])))
            await tony.close()

            func channel(_ name: String) async throws -> [String: String] {
                let response = try await ann.send(.getChannelMetadata(GetChannelMetadataRequest(channel: name)))
                guard case .getChannelMetadata(let body) = response else { throw TestFailure("unexpected \(response)") }
                return Dictionary(body.items.map { ($0.key, $0.value) }, uniquingKeysWith: { $1 })
            }
            #expect(try await eventually { try await channel("lobby")["note"] == "tony left" })
            #expect(try await channel("room") == ["owner": "ann"])
        }
    }

    @Test("actions are checked when registered: an operation a will cannot run, fields of another operation, limits, the delay, the count")
    func actionsAreCheckedWhenRegistered() async throws {
        try await withFullGateway { gateway in
            let tony = try await gateway.connect(.tcp, user: "tony")
            func refusal(_ actions: [WillAction], delay: UInt64 = 0) async -> ErrorCode? {
                guard case .failure(let error) = await outcome(
                    tony, .setWill(SetWillRequest(actions: actions, delaySeconds: delay)))
                else { return nil }
                return error.code
            }
            #expect(await refusal([WillAction(operation: UInt64(Opcode.kickUser.rawValue))]) == .invalidWillAction)
            #expect(await refusal([WillAction(operation: 99)]) == .invalidWillAction)
            var mixed = Self.status
            mixed.value = 10_001  // a publishEvent field on a metadata action
            #expect(await refusal([mixed]) == .invalidWillAction)
            let longKey = WillAction(
                operation: UInt64(Opcode.setUserMetadata.rawValue), items: [MetadataItem(key: String(repeating: "k", count: 200), value: "v")])
            #expect(await refusal([longKey]) == .keyTooLong)
            #expect(await refusal([WillAction(operation: UInt64(Opcode.publishEvent.rawValue), value: 7)]) == .reservedEventValue)
            #expect(await refusal([Self.status], delay: 3_601) == .invalidArgument)
            #expect(await refusal(Array(repeating: Self.status, count: 17)) == .batchTooLarge)
            // Nothing was registered by the refused calls.
            #expect(try await tony.send(.getWill(EmptyBody())) == .getWill(GetWillResponse()))
        }
    }

    @Test("an action the session's grants do not allow is refused when registered, with the denied resource")
    func grantsAreCheckedWhenRegistered() async throws {
        let allowed = try grants(#"[{"on":"message:lobby","allow":["read","write"]},{"on":"user:{user}","allow":["read","write"]}]"#)
        try await withAuthorizationGateway(grants: allowed) { gateway in
            let tony = try await gateway.session("tony")
            let own = WillAction(operation: UInt64(Opcode.setChannelMetadata.rawValue), channel: "lobby", items: [MetadataItem(key: "k", value: "v")])
            #expect(try await Self.setWill(tony, [own, Self.status]) == 2)
            let elsewhere = WillAction(operation: UInt64(Opcode.setChannelMetadata.rawValue), channel: "vault", items: [MetadataItem(key: "k", value: "v")])
            guard case .failure(let error) = await outcome(tony, .setWill(SetWillRequest(actions: [own, elsewhere]))) else {
                Issue.record("a will writing a channel outside the grants was accepted")
                return
            }
            #expect(error.code == .permissionDenied)
            let someoneElse = WillAction(operation: UInt64(Opcode.setUserMetadata.rawValue), userId: "ann", items: [MetadataItem(key: "k", value: "v")])
            guard case .failure(let other) = await outcome(tony, .setWill(SetWillRequest(actions: [someoneElse]))) else {
                Issue.record("a will writing another user's metadata was accepted")
                return
            }
            #expect(other.code == .permissionDenied)
            // The earlier will is still the registered one.
            guard case .getWill(let will) = try await tony.send(.getWill(EmptyBody())) else { return }
            #expect(will.actions == [own, Self.status])
        }
    }

    @Test("the client registers its will again on the new session after a reconnect, and the dropped session's will ran")
    func theClientRegistersItsWillAgainAfterAReconnect() async throws {
        try await withFullGateway { gateway in
            let ann = try await gateway.connect(.unix, user: "ann")
            let tony = makeClient(gateway, .tcp, user: "tony", policy: ReconnectPolicy(initialDelay: .milliseconds(200), jitter: 0))
            let events = Recorder(tony.connectionEvents)
            try await tony.connect()
            try await tony.setWill([Self.status])
            let session = try #require(gateway.gateway.registry.sessions(ofUser: "tony").first)
            session.disconnect(code: ErrorCode(rawValue: 0), reason: .kicked, message: "operator request")

            #expect(try await eventually { try await Self.metadata(of: "tony", ann)["status"]?.value == "offline" })
            let report = try #require(await events.first { $0.restoreReport != nil }?.restoreReport)
            #expect(report.restored == [.will(SetWillRequest(actions: [Self.status]))])
            #expect(try await tony.getWill().actions == [Self.status])
            try await tony.clearWill()
            #expect(try await tony.getWill().actions.isEmpty)
            try await tony.logout()
        }
    }
}
