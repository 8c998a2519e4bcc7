import AskLogging
import AskProtocol
import Foundation
internal import ZeroMQ

extension AskCenter {
    /// Hosts children of families on several brokers: one center (one connection) per shard of their families,
    /// opened for each shard a child needs and for no other; `centers.member(forFamily:)` is the one of a family.
    /// - Parameters:
    ///   - stateDirectory: with a list of more than one broker, each center keeps its response record in the
    ///     subfolder named after its shard; with one broker, in the folder itself.
    /// - Throws: what ``init(broker:children:stateDirectory:logger:context:options:)`` throws; centers opened by then
    ///   are stopped.
    public static func sharded(
        brokers: BrokerList,
        children: [ChildIdentity],
        stateDirectory: String?,
        logger: AskLogger,
        context: ClientContext,
        options: Options = Options()
    ) throws -> ShardedConnections<AskCenter> {
        let groups = ShardedConnections<AskCenter>.group(children, over: brokers) { $0.family }
        let centers = ShardedConnections<AskCenter>(brokers: brokers) { shard in
            var folder = stateDirectory
            if let parent = stateDirectory, brokers.entries.count > 1 {
                folder = (parent as NSString).appendingPathComponent(shard.name)
            }
            return try AskCenter(
                broker: shard.endpoint,
                children: groups.first { $0.shard == shard }?.items ?? [],
                stateDirectory: folder,
                logger: logger,
                context: context,
                options: options
            )
        }
        try centers.openAll(groups) { opened in Task { for center in opened { await center.stop() } } }
        return centers
    }
}

extension GuardianCenter {
    /// Hosts guardians of families on several brokers: one center (one connection) per shard of their families,
    /// opened for each shard a guardian needs and for no other; `centers.member(forFamily:)` is the one of a family.
    /// - Throws: what ``init(broker:guardians:logger:context:options:)`` throws; centers opened by then are stopped.
    public static func sharded(
        brokers: BrokerList,
        guardians: [GuardianIdentity],
        logger: AskLogger,
        context: ClientContext,
        options: Options = Options()
    ) throws -> ShardedConnections<GuardianCenter> {
        let groups = ShardedConnections<GuardianCenter>.group(guardians, over: brokers) { $0.family }
        let centers = ShardedConnections<GuardianCenter>(brokers: brokers) { shard in
            try GuardianCenter(
                broker: shard.endpoint,
                guardians: groups.first { $0.shard == shard }?.items ?? [],
                logger: logger,
                context: context,
                options: options
            )
        }
        try centers.openAll(groups) { opened in Task { for center in opened { await center.stop() } } }
        return centers
    }
}
