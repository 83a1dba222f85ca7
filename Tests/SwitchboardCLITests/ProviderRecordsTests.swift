import SwitchboardCLI
import SwitchboardWire
import Testing

@Suite("A provider answers from its records file")
struct ProviderRecordsTests {
    static let file = """
        {"users": [{"userId": "Bob", "name": "Bobby"}], "groups": [{"groupId": "g1", "name": "Team"}],
         "members": [{"groupId": "g1", "userId": "Bob", "nickname": "B"}], "memberLists": {"g1": ["Ann", "Bob"]}}
        """

    @Test("known records are answered found with the record, unknown ones found false")
    func answers() throws {
        let records = try ProviderRecords(jsonText: Self.file)
        #expect(records.kinds == [.user, .group, .groupMember, .memberList])
        #expect(records.answer(ProviderRequest(providerRequestId: 1, kind: .user, id: "Bob"))
            == AnswerProviderRequest(providerRequestId: 1, found: true, user: UserInfo(userId: "Bob", name: "Bobby")))
        #expect(records.answer(ProviderRequest(providerRequestId: 2, kind: .user, id: "Carl"))
            == AnswerProviderRequest(providerRequestId: 2))
        #expect(records.answer(ProviderRequest(providerRequestId: 3, kind: .groupMember, id: "g1", memberUserId: "Bob")).member?.nickname == "B")
        #expect(records.answer(ProviderRequest(providerRequestId: 4, kind: .memberList, id: "g1"))
            == AnswerProviderRequest(providerRequestId: 4, found: true, memberUserIds: ["Ann", "Bob"]))
        #expect(records.answer(ProviderRequest(providerRequestId: 5, kind: .group, id: "g1")).group?.name == "Team")
    }

    @Test("a file that is not JSON, has unknown members or bad records is a data error")
    func badFiles() {
        for text in ["{", "[]", #"{"planets": []}"#, #"{"users": [{"userId": 5}]}"#, #"{"memberLists": {"g": [1]}}"#] {
            do {
                _ = try ProviderRecords(jsonText: text)
                Issue.record("\(text) was accepted")
            } catch {
                #expect(error.status == .dataError, "\(text)")
            }
        }
    }
}
