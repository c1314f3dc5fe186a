// Package onebit implements DeepSpeed's 1-bit compressed allreduce, the
// communication behind 1-bit Adam, on host memory, and the 1-bit Adam
// optimizer built on it.
//
// A float32 ring allreduce sends 2(p-1)/p * 4n bytes per rank. The compressed
// allreduce sends each element as one sign bit plus one float32 scale per
// rank and phase, 2(p-1)/p * n/8 + 8(p-1) bytes (WireBytes), about 1/32 of
// it. The compression error is not lost: each rank keeps it, in a State, and
// adds it back into the next step's input (error feedback), so that the sum
// of the outputs over many steps tracks the sum of the true averages.
//
// # The algorithm
//
// CompressedAllReduce computes what DeepSpeed's
// NcclBackend.compressed_allreduce computes, for p ranks, rank i:
//
//  1. Pad. The buffer (n elements) is zero-padded to the length of the worker
//     error, State.PaddedLen: a multiple of 8p, so that every rank's chunk of
//     PaddedLen/p elements packs into whole bytes (see Padding).
//  2. Worker. c = x + workerError; scale = ||c||₂ / sqrt(PaddedLen); the sign
//     bit is 1 unless c < 0, that is 1 for +0, -0 and NaN (DeepSpeed's
//     c.sign().add_(1).bool(), not numpy.signbit, which calls -0 negative);
//     workerError = c - scale*(±1). Bits are packed most significant bit
//     first, as numpy.packbits does.
//  3. Phase 1. The packed signs are cut into p chunks and exchanged with an
//     all-to-all (chunk j to rank j); the scales are all-gathered.
//  4. Server. Rank i owns chunk i: it unpacks every worker's chunk to ±1,
//     multiplies by that worker's scale times 1/p and sums over the workers
//     in rank order, adds its server error, and compresses the result as in
//     step 2 with scale = ||c||₂ / sqrt(PaddedLen/p), keeping the new server
//     error.
//  5. Phase 2. The server sign chunks and server scales are all-gathered;
//     every rank decompresses the whole buffer (each element is the sign
//     times the scale of its chunk's owner) and drops the padding.
//
// All arithmetic is float32 as in DeepSpeed, except that sums of squares are
// accumulated in float64 (DeepSpeed's GPU norm accumulates in float32, so
// scales agree to float32 rounding, signs exactly). The golden vectors in
// testdata/onebit come from our own NumPy model, reference/onebit_ref.py.
//
// Each step is two passes over memory per buffer, through a Kernel:
// CompensateNorm (add the error, sum the squares) and PackUpdate (pack the
// signs, update the error); the server adds with AccumulateSigns and the
// output is written by Decompress. HostKernel is the pure-Go Kernel; device
// code can supply another with State.SetKernel.
//
// # On device memory
//
// CompressedAllReduceOn runs the same five steps on a float32 device.Buffer
// (a GPU tensor through device/cuda, or device/hostsim's fake device in
// tests): the error feedback lives in a DeviceState on the device, every
// per-element step is a DeviceKernel method queued on the caller's stream
// (device/cuda's Kernel runs our CUDA kernels; hostsim.OneBitKernel runs
// HostKernel's loops), and the exchanges are the communicator's
// collectives on device buffers. Its results are bit for bit
// CompressedAllReduce's on the same inputs.
//
// # Padding
//
// DeepSpeed's compressed_allreduce has no padding rule of its own: it pads
// to the length of the worker error its caller allocated, which must be a
// multiple of 8p. DeepSpeed's backend tests allocate the smallest such
// length (PaddedLen); OnebitAdam, 0/1 Adam and 1-bit LAMB allocate a
// multiple of p*lcm(p,8) (PaddedLenAdam). The two rules agree for every n
// when p divides 8 (1, 2, 4, 8 ranks) and not otherwise: for 12 ranks, a
// multiple of 96 against one of 288. Since the worker scale divides by the
// square root of the padded length, the rule changes the numbers. NewState
// uses PaddedLen, the least padding; Adam uses PaddedLenAdam, to compute
// what OnebitAdam computes; NewStatePadded takes either.
//
// # State
//
// The error buffers are state that lives as long as the tensor: make one
// State per tensor and rank with NewState(n, worldSize) and pass it to every
// call on that rank. Outputs are ±scale, not zero, for elements whose true
// average is zero (say, unused embedding rows), so such elements keep feeding
// error; DeepSpeed masks that momentum afterwards, and so can the caller.
// After a failed call, the buffer is unspecified and the State half updated:
// Reset it on every rank.
//
// After a successful call the State also reports what the step compressed,
// for comparing with DeepSpeed or logging: this rank's worker scale and
// packed worker signs (WorkerScale, WorkerSigns), every rank's worker scale
// (WorkerScales, gathered in phase 1), and the server scale and packed signs
// of every chunk (ServerScales, ServerSigns, gathered in phase 2, the same on
// every rank; ServerScale is this rank's own). Output element i is
// ±ServerScales()[i/(PaddedLen/p)], with the sign bit i of ServerSigns.
// Other ranks' worker signs are not kept: a rank only receives their bits of
// the chunk it owns. These methods return copies; before the first step, and
// after Reset, a failed call or a restore, they report none (ok false, nil).
//
// # Checkpoints
//
// State.MarshalBinary saves a rank's error buffers (and the sizes and rank
// they belong to); UnmarshalBinary restores them, into a zero State or one
// made with the same sizes, and the resumed run then computes bit for bit
// what the uninterrupted one would have. Each rank saves its own State, and
// a restored State refuses a communicator of another rank. DeepSpeed's
// OnebitAdam instead drops the errors when it loads a checkpoint, as a new
// or Reset State does. WorkerError and ServerError expose the buffers
// themselves, for a caller that writes its own format.
//
// # 1-bit Adam
//
// Adam follows DeepSpeed's OnebitAdam: FreezeStep steps of exact Adam with
// gradients averaged by an ordinary AllReduce, then the variance is frozen
// and only the momentum travels, compressed, with error feedback.
//
// Adam.MarshalBinary saves the step count, the momentum and variance and
// every parameter's State; with the parameters, which the caller saves,
// UnmarshalBinary resumes the run bit for bit, in warmup or compressing.
//
// The communicator is the Comm interface (AllToAll, AllGather, AllReduce),
// which *goccl.Comm implements.
package onebit
