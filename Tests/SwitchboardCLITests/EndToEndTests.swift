import Foundation
import SwitchboardTestSupport
import SwitchboardWire
import Testing

/// The real `sbctl` binary against the real `switchboard` binary, both child processes.
@Suite("sbctl against a running gateway", .serialized)
struct EndToEndTests {
    static func json(_ line: String) throws -> JSONValue {
        try JSONValue.parse(line)
    }

    @Test("user metadata set from the shell reads back in text and JSON")
    func setAndGetUserMetadata() async throws {
        try await withChildGateway { gateway in
            let set = try await gateway.sbctl(["user-meta", "set", "Tony", "Name=Tony", "Age=40", "--record-ts"])
            #expect(set.status == 0, "\(set.errorOutput)")
            #expect(set.outputLines == ["majorRevision 1"])

            let text = try await gateway.sbctl(["user-meta", "get", "Tony"], user: "Ann")
            #expect(text.status == 0)
            #expect(text.outputLines.first == "user Tony majorRevision 1")
            #expect(text.outputLines.contains { $0.hasPrefix("Name=Tony  revision=1 updated=") })
            #expect(text.outputLines.contains { $0.hasPrefix("Age=40  revision=1 updated=") })

            let json = try await gateway.sbctl(["user-meta", "get", "Tony", "--json"], user: "Ann")
            #expect(json.status == 0)
            #expect(json.outputLines.count == 1)
            let body = try #require(try Self.json(json.output)["body"])
            let response = try GetUserMetadataResponse(json: body)
            #expect(response.userId == "Tony" && response.majorRevision == 1)
            #expect(response.items.map(\.key) == ["Name", "Age"])
            #expect(response.items.allSatisfy { $0.updateTs > 0 })
        }
    }

    @Test("a CAS conflict exits 85 and prints the error code and name, in text and JSON")
    func casConflictExitStatus() async throws {
        try await withChildGateway { gateway in
            #expect(try await gateway.sbctl(["user-meta", "set", "Tony", "Name=Tony"]).status == 0)
            let conflict = try await gateway.sbctl(["user-meta", "set", "Tony", "Name=Other", "--major-revision", "5"])
            #expect(conflict.status == 85)
            #expect(conflict.output.isEmpty)
            #expect(conflict.errorOutput.hasPrefix("error 5000 revisionConflict: "), "\(conflict.errorOutput)")
            #expect(conflict.errorOutput.contains("(currentRevision 1)"))

            let item = try await gateway.sbctl(["user-meta", "set", "Tony", "Name=Other", "--item-revision", "Name=0", "--json"])
            #expect(item.status == 85)
            let error = try #require(try Self.json(item.errorOutput.trimmingCharacters(in: .whitespacesAndNewlines))["error"])
            #expect(error["code"] == .uint(5001))
            #expect(error["name"] == .string("itemRevisionConflict"))
            #expect(error["key"] == .string("Name"))

            let unchanged = try await gateway.sbctl(["user-meta", "get", "Tony"])
            #expect(unchanged.outputLines.contains { $0.hasPrefix("Name=Tony ") })
        }
    }

    @Test("channels, last-seen and kick from the command line: a member listed, online, kicked, then last seen")
    func moderationFromTheCommandLine() async throws {
        try await withChildGateway { gateway in
            let ann = try gateway.start(["shell"], user: "Ann", pipeInput: true)
            try ann.send("channel subscribe lobby")
            #expect(await eventually { ann.outputLines.contains("ok") }, "\(ann.output)\(ann.errorOutput)")

            let channels = try await gateway.sbctl(["channels"])
            #expect(channels.status == 0, "\(channels.errorOutput)")
            #expect(channels.outputLines == ["lobby  message  users=1 sessions=1"])
            #expect(try await gateway.sbctl(["last-seen", "Ann", "Nobody"]).outputLines == ["Ann  online", "Nobody  never"])

            let kick = try await gateway.sbctl(["kick", "Ann", "--reason", "closing time"])
            #expect(kick.status == 0, "\(kick.errorOutput)")
            #expect(kick.outputLines == ["sessionsEnded 1"])
            #expect(await ann.exitStatus() != nil)
            #expect(
                await eventually {
                    (try? await gateway.sbctl(["last-seen", "Ann"]))?.outputLines.first?.hasPrefix("Ann  lastSeen=") == true
                })
            #expect(try await gateway.sbctl(["channels"]).outputLines == ["no channels"])
        }
    }

    @Test("who-now --state lists a member whose state a piped shell session set")
    func whoNowShowsState() async throws {
        try await withChildGateway { gateway in
            let ann = try gateway.start(["shell"], user: "Ann", pipeInput: true)
            try ann.send("channel subscribe lobby")
            try ann.send(#"state set lobby mood=happy "note=two words""#)
            #expect(await eventually { ann.outputLines.filter { $0 == "ok" }.count == 2 }, "\(ann.output)\(ann.errorOutput)")

            let who = try await gateway.sbctl(["who-now", "lobby", "--state"])
            #expect(who.status == 0)
            #expect(who.outputLines == ["totalOccupancy 1", #"Ann  mood=happy  note="two words""#])

            let json = try await gateway.sbctl(["who-now", "lobby", "--state", "--json"])
            let body = try WhoNowResponse(json: try #require(try Self.json(json.output)["body"]))
            #expect(body.users == [UserState(userId: "Ann", states: [
                StateItem(key: "mood", value: "happy"), StateItem(key: "note", value: "two words"),
            ])])

            try ann.closeInput()
            #expect(await ann.exitStatus() == 0)
        }
    }

    @Test("events: subscribe, query, and a published event reaches the subscriber's watch")
    func eventsSubscribePublishQuery() async throws {
        try await withChildGateway { gateway in
            let subscribe = try await gateway.sbctl(["events", "subscribe", "Ann", "--expiry", "3600"])
            #expect(subscribe.status == 0, "\(subscribe.errorOutput)")
            // The answer names where the node's numbering of online-only events stands (resumeEvents).
            #expect(subscribe.outputLines.count == 1 && subscribe.output.hasPrefix("ok (events epoch="), "\(subscribe.output)")
            let stands = try await gateway.sbctl(["events", "resume"])
            #expect(stands.status == 0 && stands.output.hasPrefix("events epoch=") && !stands.output.contains("gap"))
            let otherRun = try await gateway.sbctl(["events", "resume", "1", "1"])
            #expect(otherRun.status == 0 && otherRun.output.contains(" gap"), "\(otherRun.output)")

            let query = try await gateway.sbctl(["events", "query", "Ann"])
            #expect(query.status == 0)
            let line = try #require(query.outputLines.first)
            #expect(line.hasPrefix("Ann  eventType=1 remaining="), "\(line)")

            // The user-meta snapshot tells that the watch is logged in before Ann publishes.
            let watch = try gateway.start(["watch", "--user-meta", "Tony", "--json"])
            #expect(await watch.waitForOutput(containing: #""op":"storageEvent""#), "\(watch.errorOutput)")
            let publish = try await gateway.sbctl(["events", "publish", "10001", "--ext", "hello there"], user: "Ann")
            #expect(publish.status == 0 && publish.output.hasPrefix("eventId "), "\(publish.errorOutput)")
            #expect(await watch.waitForOutput(containing: #""value":10001"#), "\(watch.output)")
            watch.signal(SIGINT)
            #expect(await watch.exitStatus() == 0)

            let event = try #require(watch.outputLines.first { $0.contains(#""value":10001"#) })
            guard case .push(.subscribedEvents(let pushed)) = try SwitchboardMessage(json: Self.json(event)) else {
                Issue.record("not a subscribedEvents push: \(event)")
                return
            }
            #expect(pushed.events.contains { $0.publisher == "Ann" && $0.ext == "hello there" })

            let reserved = try await gateway.sbctl(["events", "publish", "5"], user: "Ann")
            #expect(reserved.status == 87 && reserved.errorOutput.hasPrefix("error 7010 reservedEventValue: "))
        }
    }

    @Test("a profile record read back lists the ids nobody knew, in JSON and text")
    func profileSetAndGet() async throws {
        try await withChildGateway { gateway in
            #expect(try await gateway.sbctl(["profile", "user", "set", "Tony", "--name", "Tony Stark"]).status == 0)
            let get = try await gateway.sbctl(["profile", "user", "get", "Tony", "Nobody", "--json"], user: "Ann")
            #expect(get.status == 0)
            let body = try GetUserInfoResponse(json: try #require(try Self.json(get.output)["body"]))
            #expect(body.users.map(\.name) == ["Tony Stark"] && body.missing == ["Nobody"])

            let text = try await gateway.sbctl(["profile", "user", "get", "Tony"])
            #expect(text.outputLines.first?.hasPrefix(#"Tony  name="Tony Stark"  updated="#) == true)
        }
    }

    @Test("watch prints the push another sbctl invocation caused, then stops after --count pushes")
    func watchReceivesPushFromAnotherInvocation() async throws {
        try await withChildGateway { gateway in
            let watch = try gateway.start(["watch", "--user-meta", "Tony", "--count", "2"], user: "Watcher")
            #expect(await watch.waitForOutput(containing: "storageEvent snapshot user Tony"), "\(watch.errorOutput)")
            #expect(try await gateway.sbctl(["user-meta", "set", "Tony", "k=v"]).status == 0)
            #expect(await watch.exitStatus() == 0, "\(watch.errorOutput)")
            #expect(watch.outputLines == [
                "storageEvent snapshot user Tony majorRevision=0",
                "storageEvent set user Tony majorRevision=1 publisher=Tony: k=v",
            ])
        }
    }

    @Test("channel broadcast reaches a watch of the channel, which first prints the rewound ones with --rewind")
    func broadcastReachesAWatchAfterItsRewind() async throws {
        try await withChildGateway { gateway in
            let sent = try await gateway.sbctl(["channel", "broadcast", "doc", "earlier one"])
            #expect(sent.status == 0, "\(sent.errorOutput)")
            #expect(sent.outputLines.count == 1 && sent.outputLines[0].hasPrefix("broadcast #"), "\(sent.output)")
            let watch = try gateway.start(
                ["watch", "--channel", "doc", "--no-presence", "--rewind", "5", "--count", "1"], user: "Watcher")
            #expect(await watch.waitForOutput(containing: "latestSequence"), "\(watch.errorOutput)")
            #expect(try await gateway.sbctl(["channel", "broadcast", "doc", "live"]).status == 0)
            #expect(await watch.exitStatus() == 0, "\(watch.errorOutput)")
            let lines = watch.outputLines
            #expect(lines.count == 3, "\(lines)")
            #expect(lines.first?.hasSuffix(#"data="earlier one""#) == true, "\(lines)")
            #expect(lines.dropFirst().first?.hasPrefix("latestSequence ") == true, "\(lines)")
            #expect(lines.last?.hasPrefix("channelBroadcast doc #") == true && lines.last?.hasSuffix("data=live") == true, "\(lines)")
        }
    }

    @Test("the shell driven through a pipe runs commands, lists and recalls history, and exits with the last status")
    func shellThroughPipeWithHistoryRecall() async throws {
        try await withChildGateway { gateway in
            let history = TemporaryPath("sbctl-history")
            defer { history.remove() }
            let historyPath = history.path
            let shell = try gateway.start(["shell"], environment: ["SBCTL_HISTORY": historyPath], pipeInput: true)
            for line in ["user-meta set - a=1", "user-meta get", "# a comment", "history", "!2", "lock release lobby none"] {
                try shell.send(line)
            }
            try shell.closeInput()
            #expect(await shell.exitStatus() == 84, "\(shell.errorOutput)")  // lockNotFound: the last command's status
            #expect(shell.outputLines == [
                "majorRevision 1",
                "user Tony majorRevision 1", "a=1  revision=1",
                "  1  user-meta set - a=1", "  2  user-meta get", "  3  history",
                "user Tony majorRevision 1", "a=1  revision=1",
            ])
            #expect(shell.errorOutput.contains("error 4003 lockNotFound: "))
            let saved = try String(contentsOfFile: historyPath, encoding: .utf8)
            #expect(saved == "user-meta set - a=1\nuser-meta get\nhistory\nuser-meta get\nlock release lobby none\n")

            // A second shell starts with the saved history; exit's status wins.
            let again = try gateway.start(["shell", "--json"], environment: ["SBCTL_HISTORY": historyPath], pipeInput: true)
            try again.send("!4")
            try again.send("exit 3")
            try again.closeInput()
            #expect(await again.exitStatus() == 3)
            let first = try #require(again.outputLines.first)
            let body = try #require(try Self.json(first)["body"])
            #expect(try GetUserMetadataResponse(json: body).items.map(\.key) == ["a"])
        }
    }

    @Test("ping prints each round trip and a summary; info shows the endpoint and what WELCOME said")
    func pingAndInfo() async throws {
        try await withChildGateway { gateway in
            let ping = try await gateway.sbctl(["ping", "--count", "3", "--interval", "0"])
            #expect(ping.status == 0, "\(ping.errorOutput)")
            #expect(ping.outputLines.count == 4, "\(ping.output)")
            for (index, line) in ping.outputLines.prefix(3).enumerated() {
                #expect(line.hasPrefix("pong seq=\(index + 1) time=") && line.hasSuffix(" ms"), "\(line)")
            }
            #expect(ping.outputLines.last?.hasPrefix("3 pings: min ") == true)

            let info = try await gateway.sbctl(["info"])
            #expect(info.status == 0, "\(info.errorOutput)")
            for expected in [
                "endpoint unix:\(gateway.socketPath)", "server switchboard", "version \(SwitchboardVersion.current)", "protocol 1",
                "user Tony admin", "features zlib", "maxFrameSize 1048576", "maxInflight 128", "requestsPerSecond 20000",
                "heartbeat 15000 ms, 3 misses", "compressThreshold 512",
            ] {
                #expect(info.outputLines.contains(expected), "missing '\(expected)' in \(info.outputLines)")
            }
            #expect(info.outputLines.contains { $0.hasPrefix("session ") })

            let json = try await gateway.sbctl(["info", "--json"])
            let value = try Self.json(try #require(json.outputLines.first))
            #expect(value["kind"]?.stringValue == "info")
            #expect(value["endpoint"]?.stringValue == "unix:\(gateway.socketPath)")
            let welcome = try Welcome(json: try #require(value["welcome"]))
            #expect(welcome.userId == "Tony" && welcome.serverName == "switchboard/\(SwitchboardVersion.current)")

            // Both work inside the shell too.
            let shell = try gateway.start(["shell"], pipeInput: true)
            try shell.send("info")
            try shell.send("ping")
            try shell.closeInput()
            #expect(await shell.exitStatus() == 0, "\(shell.errorOutput)")
            #expect(shell.outputLines.contains("user Tony admin"))
            #expect(shell.outputLines.last?.hasPrefix("pong seq=1 time=") == true)
        }
    }

    @Test("info shows an admin the gateway's statistics (sessions, sets, writes) after the session facts, in text and JSON")
    func infoShowsStatistics() async throws {
        try await withChildGateway { gateway in
            #expect(try await gateway.sbctl(["user-meta", "set", "Tony", "Name=Tony", "Age=40"]).status == 0)
            #expect(try await gateway.sbctl(["channel-meta", "set", "lobby", "topic=hi"]).status == 0)
            #expect(try await gateway.sbctl(["user-meta", "set", "Tony", "Name=T"]).status == 0)

            let info = try await gateway.sbctl(["info"])
            #expect(info.status == 0, "\(info.errorOutput)")
            let start = try #require(info.outputLines.firstIndex(of: "statistics"), "\(info.outputLines)")
            #expect(info.outputLines[..<start].contains("user Tony admin"))
            var stats: [String: String] = [:]
            for line in info.outputLines[(start + 1)...] {
                let words = line.split(separator: " ", maxSplits: 1).map(String.init)
                if words.count == 2 { stats[words[0]] = words[1].trimmingCharacters(in: .whitespaces) }
            }
            #expect(stats["version"] == SwitchboardVersion.current, "\(info.outputLines)")
            #expect(stats["metadataSets"] == "2" && stats["metadataItems"] == "3", "\(info.outputLines)")
            #expect(stats["writesTotal"] == "3", "\(info.outputLines)")
            #expect(Int(stats["sessions"] ?? "") ?? 0 >= 1, "\(info.outputLines)")
            #expect(stats["uptime"]?.hasSuffix("s") == true && stats["nodes"] == nil, "\(info.outputLines)")

            let json = try await gateway.sbctl(["info", "--json"])
            #expect(json.status == 0, "\(json.errorOutput)")
            let value = try Self.json(try #require(json.outputLines.first))
            let stats2 = try InfoResponse(json: try #require(value["stats"]))
            #expect(stats2.metadataSets == 2 && stats2.metadataItems == 3 && stats2.writesTotal == 3)
            #expect(stats2.version == SwitchboardVersion.current)
        }
    }

    @Test("a gateway that cannot be reached exits 69")
    func unreachableGatewayExits69() async throws {
        let child = try ChildProcess(Executables.sbctl, ["who-now", "lobby", "--unix", "/tmp/sbctl-nothing-here.sock"])
        #expect(await child.exitStatus() == 69)
        #expect(child.errorOutput.hasPrefix("error unavailable: "))
        #expect(child.errorOutput.contains("unix:/tmp/sbctl-nothing-here.sock"))
    }

    @Test("a refused login exits 77; a minted token logs in, and the own-record rule refuses with 82")
    func tokensAndPermissions() async throws {
        let secret = "sbctl-test-secret-of-at-least-32-bytes"
        try await withChildGateway(extraArguments: ["--token-secret", secret]) { gateway in
            let noToken = try await gateway.sbctl(["where-now"])
            #expect(noToken.status == 77, "\(noToken.errorOutput)")
            #expect(noToken.errorOutput.hasPrefix("error 200"))

            let mint = try ChildProcess(Executables.switchboard, ["token", "--user", "Ann", "--token-secret", secret])
            #expect(await mint.exitStatus() == 0)
            let token = mint.output.trimmingCharacters(in: .whitespacesAndNewlines)
            let own = try await gateway.sbctl(["profile", "user", "set", "Ann", "--name", "Ann"], user: nil,
                environment: ["SWITCHBOARD_TOKEN": token])
            #expect(own.status == 0, "\(own.errorOutput)")
            let other = try await gateway.sbctl(["profile", "user", "set", "Tony", "--name", "T"], user: nil,
                environment: ["SWITCHBOARD_TOKEN": token])
            #expect(other.status == 82)
            #expect(other.errorOutput.hasPrefix("error 2003 permissionDenied: "))
        }
    }

    @Test("sbctl token mint signs grants the gateway enforces: the granted pattern is written, another channel refused with 82")
    func mintedGrantsAreEnforced() async throws {
        let secretFile = TemporaryPath("sbctl-secret", suffix: ".txt")
        defer { secretFile.remove() }
        try Data("sbctl-mint-test-secret-of-at-least-32-bytes\n".utf8).write(to: URL(fileURLWithPath: secretFile.path))
        try await withChildGateway(extraArguments: ["--token-secret-file", secretFile.path]) { gateway in
            let mint = try ChildProcess(Executables.sbctl, [
                "token", "mint", "--user", "Ann", "--jti", "ann-1", "--secret-file", secretFile.path,
                "--grants", #"[{"on":"message:room:*","allow":["read","write"]}]"#,
            ])
            #expect(await mint.exitStatus() == 0, "\(mint.errorOutput)")
            let token = mint.output.trimmingCharacters(in: .whitespacesAndNewlines)
            let environment = ["SWITCHBOARD_TOKEN": token]
            let granted = try await gateway.sbctl(["channel-meta", "set", "room:a", "topic=hi"], user: nil, environment: environment)
            #expect(granted.status == 0, "\(granted.errorOutput)")
            let refused = try await gateway.sbctl(["channel-meta", "set", "lobby", "topic=hi"], user: nil, environment: environment)
            #expect(refused.status == 82, "\(refused.output)\(refused.errorOutput)")
            #expect(refused.errorOutput.hasPrefix("error 2003 permissionDenied: "))

            // The variables the gateway reads give the secret too; a short one is refused before anything is signed.
            let fromEnvironment = try ChildProcess(
                Executables.sbctl, ["token", "mint", "--user", "Ann"],
                environment: ["SWITCHBOARD_TOKEN_SECRET_FILE": secretFile.path])
            #expect(await fromEnvironment.exitStatus() == 0, "\(fromEnvironment.errorOutput)")
            let read = try await gateway.sbctl(
                ["where-now"], user: nil,
                environment: ["SWITCHBOARD_TOKEN": fromEnvironment.output.trimmingCharacters(in: .whitespacesAndNewlines)])
            #expect(read.status == 0, "\(read.errorOutput)")
            let short = try ChildProcess(
                Executables.sbctl, ["token", "mint", "--user", "Ann"], environment: ["SWITCHBOARD_TOKEN_SECRET": "short"])
            #expect(await short.exitStatus() == 64)
            #expect(short.output.isEmpty)
            #expect(short.errorOutput.contains("SWITCHBOARD_TOKEN_SECRET is 5 bytes long"))
        }
    }
}
