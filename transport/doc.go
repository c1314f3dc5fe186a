// Package transport defines how goccl moves bytes between ranks: the
// Endpoint and Request interfaces every transport implements, message tags,
// and the matching engine (posted receives and the unexpected-message queue)
// that transports share.
//
// Implementations live in sub-packages: transport/mem runs ranks as
// goroutines in one process, transport/tcp connects processes over sockets.
// The conformance suite in transport/transporttest is run by every one.
package transport
