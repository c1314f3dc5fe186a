package tcp

// HandshakeTimeout is how long an incoming handshake may take, for the
// external tests that check a stalled stranger is dropped in time.
const HandshakeTimeout = handshakeTimeout
