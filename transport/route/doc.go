// Package route is a transport.Endpoint over several endpoints, each
// reaching some of a job's ranks, that sends to each peer over exactly one
// of them: the first route, in the order given to New, whose endpoint
// reaches that peer.
//
// goccl.Init builds one for a job whose ranks share hosts: transport/shm
// among the ranks of this host (its endpoint numbers them 0..L-1, the
// Route's Ranks say which job ranks they are) and transport/tcp among all
// ranks, in that order, so that a peer on this host goes by shm and any
// other by TCP:
//
//	job ranks       0     1     2     3        host A: 0 1   host B: 2 3
//	rank 0's routes shm{0,1}  tcp{0,1,2,3}
//	rank 0 -> peer  shm   shm   tcp   tcp      (itself: shm, the first route)
//
// Another transport is another Route: list it before the ones it should
// win over (an InfiniBand route spanning every host, before TCP).
//
// # What stays true
//
// Each peer uses one underlying endpoint, so the transport.Endpoint rules
// hold through the router: messages between two ranks under one tag keep
// their order, tags stay independent, a message to oneself goes through
// the route that reaches oneself. Both ranks of a pair must pick the same
// route, so every rank must build its routes from facts all ranks share
// (which host each rank is on), in the same order.
//
// Ranks are translated both ways: Isend and Irecv take job ranks, and an
// error naming a peer (a transport.PeerError at the top of a request's
// error), a loss reported through transport.PeerLossNotifier and a stray
// message reported through transport.StrayReporter name the job rank, not
// the rank within the route.
//
// The router offers both optional capabilities and forwards them to every
// route whose endpoint has them (a route without one reports nothing). A
// peer's loss is reported once, with its job rank, even when two routes
// see it (a TCP mesh that also links the ranks of one host notices the
// death of a process that shm's monitor noticed too). Retire retires the
// tag on every route. Close closes every route.
//
// # Boards
//
// The router is a transport.Boarder when the route that reaches every
// member of a group is one and the same, and its endpoint offers boards:
// transport/shm within a host, so that goccl runs a group's small
// allreduces and barriers on a shared segment wherever its members share
// a host, even in a job that spans hosts. The members are asked for by
// job rank and handed to that endpoint by its own numbering, and Lost
// names job ranks. A group whose members go by different routes (some on
// another host) gets an error, and goccl runs its collectives over
// messages.
package route
