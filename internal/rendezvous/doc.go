// Package rendezvous implements how the ranks of a job meet and connect:
// the store keys of each epoch, the exchange of addresses, which ranks
// share a host, and the transport to each peer (transport/shm within a
// host, transport/tcp between hosts, transport/ib where asked or where
// every rank has it; transport/route joins them into one endpoint). Init
// uses it to form the world, Shrink and Readmit (the root's elastic.go)
// to form the next epoch. It knows nothing of communicators: it takes a
// store.Store and returns a transport.Endpoint.
//
// # Keys and epochs
//
// Every key of a job lives under goccl/<job>/, the job being
// GOCCL_JOB_ID or the master address. A communicator belongs to a
// generation of the world (Init makes generation 0, each Readmit the next)
// and, within it, a shrink epoch (0: the full world; each round of Shrink
// the next). An epoch's keys live under goccl/<job>/<epoch>, where epoch
// is "" for Init's world and "g<gen>.s<shrink>/" for every other, and the
// transports see the store through store.WithPrefix(goccl/<job>/<epoch>),
// which puts a "/" between (goccl/<job>//tcp/addr/3 for Init). The
// transports' handshakes carry <job>/g<gen>.s<shrink> (<job> for Init), so
// a stale rank of an older epoch can neither read the keys of a newer one
// nor connect to its ranks. Two keys are the job's, whatever the epoch:
//
//	goccl/<job>/alive/<jr>   job rank jr's process is alive: an ephemeral
//	                         key, set once it has connected, that the store
//	                         drops with its connection (Settled, Alive)
//	goccl/<job>/gen          the newest generation that has formed, set by
//	                         its ranks when connected (Settled); a
//	                         replacement process reads it (Rejoin)
//
// # Init: who waits for what
//
// Under transport tcp or ib, Connect goes straight to the transport: each
// rank publishes its address (tcp/addr/<r>, or transport/ib's keys) and
// reads those of the peers it links. Under auto and shm, first:
//
//  1. ib/usable (auto only): a rank that can use InfiniBand adds itself.
//     A rank without verbs sends nothing.
//  2. The host group (hostGroup): each rank counts itself in at its host's
//     key (host/<hash of the host identity>/n), writes its slot and counts
//     itself in at hosts/arrived; the job's last arrival sets hosts/all.
//     Each host's first arrival waits for hosts/all, reads its host's
//     slots, asks whether the host has room for the shared-memory rings,
//     and sets host/<h>/list: a nonce for the segments (or "-": no room)
//     and the ranks. The others wait for their host's list only. 5N+H+1
//     requests for N ranks on H hosts, none reading another host's keys.
//  3. The host blocks (agreeHostBlocks): each rank counts itself at
//     hosts/blocks/<L> (the size of its host's block when its host holds
//     an aligned block of ranks, else "-"), then at hosts/blocked; the
//     last sets hosts/blocked/all, which every rank waits for and then
//     reads its counter: L holds if all N counted it. The algorithm
//     choice needs all ranks to agree on it.
//  4. The choice (choose): shared memory with the ranks of the host
//     (unless there is no room: then alone), and when some rank is on
//     another host a full mesh of TCP, or of InfiniBand when all N ranks
//     said ib/usable (read once, after step 2, which every offer
//     preceded). Transport shm fails when a rank is elsewhere or there is
//     no room.
//
// Every wait is for a key that a rank sets before it waits itself, so no
// rank waits for one that waits for it. The store requests are O(1) a
// rank (the first arrival of a host O(L)); no rank reads every rank's
// keys.
//
// With lazy TCP links (the default), transport/tcp links only the ring
// neighbours at Connect and the others when they first talk; it reads
// addresses through an AddrBook, which the communicator fills, at its
// closing synchronisation, with every rank's address passed from rank to
// rank (the root's shareAddrs, a Bruck allgather of AddrSlot-byte slots:
// PutSlot, Learn), so that no later link needs the store and the store's
// host may leave. Address requests are then N Sets and N Gets over the
// job. Then each rank says it is alive (Settled).
//
// # Shrink's epochs
//
// Shrink meets in a fresh shrink epoch of the same generation, over TCP
// only, among the survivors, through a Round's keys under
// goccl/<job>/<epoch>shrink/:
//
//	joined, slot/<i>   registration: Add joined, then the job rank in slot i
//	lost/<jr>          a member blames job rank jr
//	members            the first proposal of who is in (a compare-and-set
//	                   that every later proposal reads)
//	status/<jr>        member jr's word on its connecting: "ok" or why not
//
// A member registers, waits (Shrink's policy, in the root) until every
// rank is registered or known lost (its alive key gone, or blamed),
// proposes the registered ranks still alive and takes the agreed list,
// connects in the epoch as its index in the list, and says how it went.
// If a member failed, or died without a word, every member sees it
// (Status) and they go again in the next shrink epoch. Readmit meets in
// the next generation's epoch 0, every survivor as its job rank, and the
// replacement process reads the generation to join (Rejoin) before it
// connects over TCP like them.
package rendezvous
