import Foundation
import NIOCore
import SwitchboardClient
import SwitchboardServer
import SwitchboardWire
import Testing

/// A channel's member list as a client rebuilds it from presence events.
struct PresenceRosterModel {
    var users: Set<String> = []
    var occupancy: UInt64 = 0

    mutating func apply(_ event: PresenceEvent) {
        switch event.eventType {
        case .snapshot: self.users.formUnion(event.snapshotUsers)
        case .remoteJoin: self.users.insert(event.publisher)
        case .remoteLeave, .remoteTimeout: self.users.remove(event.publisher)
        case .interval:
            self.users.formUnion(event.joined)
            self.users.subtract(event.left)
            self.users.subtract(event.timedOut)
        default: break
        }
        self.occupancy = event.totalOccupancy
    }
}

@Suite struct PresenceIntervalTests {
    @Test func aboveTheThresholdChangesAreBatchedIntoIntervalEvents() async throws {
        try await withPresence(.testing(interval: .milliseconds(300), threshold: 8)) { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("hall")
            _ = await alice.nextEvent()
            var members: [String: PresenceClient] = [:]
            for index in 1...7 {
                let member = try await fixture.connect("m\(index)")
                try await member.subscribe("hall", presence: false)
                members["m\(index)"] = member
            }
            let singles = await alice.events(7)
            #expect(singles.map(\.eventType) == Array(repeating: .remoteJoin, count: 7))
            #expect(singles.map(\.totalOccupancy) == Array(2...8))

            // Past the threshold: no single events, one interval event per interval.
            for index in 8...13 { members["m\(index)"] = try await fixture.connect("m\(index)") }
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 8...13 {
                    let member = members["m\(index)"]
                    group.addTask { try await member?.subscribe("hall", presence: false) }
                }
                try await group.waitForAll()
            }
            let newcomers = Set((8...13).map { "m\($0)" })
            let batch = await alice.events { events in Set(events.flatMap(\.joined)).isSuperset(of: newcomers) }
            #expect(batch.allSatisfy { $0.eventType == .interval }, "\(batch.map(\.eventType))")
            #expect(Set(batch.flatMap(\.joined)) == newcomers)
            #expect(batch.count < newcomers.count, "the joins were not batched")
            #expect(batch.last?.totalOccupancy == 14)
            #expect(ContinuousClock.now - started >= .milliseconds(250))

            // Nothing changed: nothing sent.
            #expect(await alice.eventsDuring(.milliseconds(400)).isEmpty)

            try await members["m1"]?.setState("hall", ["mood": "x"])
            try await members["m2"]?.unsubscribe("hall")
            try await members["m3"]?.connection.logout()
            let changes = await alice.events { events in
                Set(events.flatMap(\.left)).isSuperset(of: ["m2", "m3"]) && events.contains { !$0.stateChanged.isEmpty }
            }
            #expect(changes.allSatisfy { $0.eventType == .interval })
            #expect(Set(changes.flatMap(\.left)) == ["m2", "m3"])
            #expect(changes.flatMap(\.stateChanged) == [UserState(userId: "m1", states: [StateItem(key: "mood", value: "x")])])
            #expect(changes.last?.totalOccupancy == 12)

            // Back at or below the threshold, single events resume after the next interval event.
            // Together, so that they fall into one interval: a leave takes effect at once (SB-13.3-6), and once an
            // interval event left the channel at or below the threshold, later leaves would be single events.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 4...8 {
                    let member = members["m\(index)"]
                    group.addTask { try await member?.unsubscribe("hall") }
                }
                try await group.waitForAll()
            }
            let lastBatch = await alice.events { events in Set(events.flatMap(\.left)).count == 5 }
            #expect(lastBatch.allSatisfy { $0.eventType == .interval })
            #expect(lastBatch.last?.totalOccupancy == 7)
            let late = try await fixture.connect("late")
            try await late.subscribe("hall", presence: false)
            let join = try #require(await alice.nextEvent())
            #expect(join.eventType == .remoteJoin && join.publisher == "late" && join.totalOccupancy == 8)
        }
    }

    @Test func aJoinStormStaysCheapAndEveryMembersViewConverges() async throws {
        var configuration = PresenceConfiguration.testing(interval: .milliseconds(100))
        configuration.maxUsersPerPush = 100
        try await withPresence(configuration) { fixture in
            let alice = try await fixture.connect("alice")
            try await alice.subscribe("arena")
            let users = (0..<300).map { String(format: "fan%03d", $0) }
            let started = ContinuousClock.now
            let fans = try await joinPresenceChannel(fixture, users, channel: "arena", presence: true)
            let joinTime = ContinuousClock.now - started
            #expect(joinTime < .seconds(30), "300 joins took \(joinTime)")

            // Alice's view, built from her events only, reaches the real member list.
            var roster = PresenceRosterModel()
            let expected = Set(users + ["alice"])
            _ = await alice.events(timeout: .seconds(20)) { events in
                roster = PresenceRosterModel()
                for event in events { roster.apply(event) }
                return roster.users == expected
            }
            #expect(roster.users == expected)
            #expect(roster.occupancy == 301)
            #expect(Set(try await alice.allMembers("arena")) == expected)

            // A member who joined during the storm converges too.
            let fan = try #require(fans["fan150"])
            var fanRoster = PresenceRosterModel()
            _ = await fan.events(timeout: .seconds(20)) { events in
                fanRoster = PresenceRosterModel()
                for event in events { fanRoster.apply(event) }
                return fanRoster.users == expected
            }
            #expect(fanRoster.users == expected)

            // 50 leave; views follow.
            for user in users.prefix(50) { try await fans[user]?.connection.logout() }
            let remaining = expected.subtracting(users.prefix(50))
            _ = await alice.events(timeout: .seconds(20)) { events in
                for event in events.suffix(1) { roster.apply(event) }
                return roster.users == remaining
            }
            #expect(roster.users == remaining && roster.occupancy == 251)

            // A late joiner's snapshot comes in pushes of at most 100 users and lists everyone.
            let late = try await fixture.connect("late")
            try await late.subscribe("arena")
            let snapshot = await late.events { events in
                Set(events.flatMap(\.snapshotUsers)).count >= 252
            }
            #expect(snapshot.allSatisfy { $0.eventType == .snapshot && $0.snapshot.count <= 100 && $0.totalOccupancy == 252 })
            #expect(snapshot.count == 3)
            #expect(Set(snapshot.flatMap(\.snapshotUsers)) == remaining.union(["late"]))
        }
    }
}
