package hostsim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// Errors that hostsim wraps, so that a test can tell misuse apart with
// errors.Is.
var (
	// ErrClosed is returned by every call after Device.Close, and by waits
	// that Close interrupts.
	ErrClosed = errors.New("device closed")
	// ErrFreed is returned for a Buffer or Host used after its Free, and by
	// a second Free.
	ErrFreed = errors.New("memory freed")
	// ErrDestroyed is returned for a Stream or Event used after Destroy.
	ErrDestroyed = errors.New("destroyed")
	// ErrNotPinned is returned by an asynchronous copy given host memory
	// that is not inside a live AllocHost allocation.
	ErrNotPinned = errors.New("host memory not from AllocHost")
	// ErrRange is returned for an offset or length outside a buffer.
	ErrRange = errors.New("range outside buffer")
	// ErrForeign is returned for a Buffer, Event or Stream of another
	// device (or another implementation of package device).
	ErrForeign = errors.New("not from this device")
)

// align is the alignment of every allocation's first byte, as cudaMalloc
// gives at least 256 and a kernel on 16-byte vectors needs 16.
const align = 16

var devices atomic.Int64 // numbers devices for String

// Option configures New.
type Option interface{ apply(*Device) }

// Latency makes work on a stream take time, slept in the stream's
// goroutine, so that streams overlap as a GPU's copy engines and
// multiprocessors do. A zero field adds nothing.
type Latency struct {
	// Copy is added to every copy: to host, from host and on the device.
	Copy time.Duration
	// CopyBandwidth, in bytes per second, adds bytes/CopyBandwidth to every
	// copy; 0 means infinitely fast.
	CopyBandwidth float64
	// Kernel is added to every Reduce and Scale.
	Kernel time.Duration
	// Launch is added to every Stream.Launch, before its function runs.
	Launch time.Duration
}

func (l Latency) apply(d *Device) { d.lat = l }

func (l Latency) copyTime(n int) time.Duration {
	t := l.Copy
	if l.CopyBandwidth > 0 {
		t += time.Duration(float64(n) / l.CopyBandwidth * float64(time.Second))
	}
	return t
}

// Device is a device on host memory. Its methods are safe for concurrent
// use. It implements device.Device.
type Device struct {
	name  string
	lat   Latency
	noIPC bool // refuse IPC (NoIPC)

	closed   atomic.Bool
	closedCh chan struct{}

	mu       sync.Mutex // guards the fields below; taken after no other lock
	hosts    []*Host    // live AllocHost memory, sorted by address
	streams  int        // streams created, to number them
	wg       sync.WaitGroup
	sticky   error // the first op that failed while running; every call returns it
	timeline *[]Span
}

var _ device.Device = (*Device)(nil)

// New returns a Device on host memory, configured by opts.
func New(opts ...Option) *Device {
	d := &Device{
		name:     fmt.Sprintf("hostsim:%d", devices.Add(1)-1),
		closedCh: make(chan struct{}),
	}
	for _, o := range opts {
		o.apply(d)
	}
	return d
}

// String names the device, "hostsim:N" with N counting devices made by New
// in this process from 0.
func (d *Device) String() string { return d.name }

// Close stops the device: it drops the work not yet run, interrupts every
// wait on it with an error wrapping ErrClosed, and returns once no stream
// goroutine runs any more (a function given to Stream.Launch must
// therefore return). After Close every method of the device and of what it
// handed out returns an error, Close included.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Load() {
		d.mu.Unlock()
		return d.errorf("close", ErrClosed)
	}
	d.closed.Store(true)
	close(d.closedCh)
	d.mu.Unlock()
	d.wg.Wait()
	return nil
}

// errorf returns "hostsim:N: op: msg", wrapping the %w arguments.
func (d *Device) errorf(op string, format any, args ...any) error {
	switch f := format.(type) {
	case error:
		return fmt.Errorf("%s: %s: %w", d.name, op, f)
	case string:
		return fmt.Errorf("%s: %s: "+f, append([]any{d.name, op}, args...)...)
	}
	panic("hostsim: errorf format")
}

// check returns the error every call returns on a closed or failed device.
func (d *Device) check(op string) error {
	if d.closed.Load() {
		return d.errorf(op, ErrClosed)
	}
	d.mu.Lock()
	err := d.sticky
	d.mu.Unlock()
	if err != nil {
		return d.errorf(op, "device failed earlier: %w", err)
	}
	return nil
}

// fail records err as the device's sticky error, like a CUDA context's:
// the work after it is skipped and every later call returns it.
func (d *Device) fail(err error) {
	d.mu.Lock()
	if d.sticky == nil {
		d.sticky = err
	}
	d.mu.Unlock()
}

// Alloc allocates n elements of dt on the device. The memory is zeroed
// (the contract only promises undefined contents) and starts 16-byte
// aligned.
func (d *Device) Alloc(dt reduceop.DType, n int) (device.Buffer, error) {
	if err := d.check("alloc"); err != nil {
		return nil, err
	}
	if !dt.Valid() {
		return nil, d.errorf("alloc", "invalid dtype %v", dt)
	}
	if n < 0 || n > math.MaxInt/dt.Size()-align {
		return nil, d.errorf("alloc", "%d elements of %v: invalid length", n, dt)
	}
	mem := alignedBytes(n * dt.Size())
	return &Buffer{a: &alloc{d: d, mem: mem}, root: true, dt: dt, n: n, mem: mem}, nil
}

// Wrap returns a Buffer over b, memory the caller owns, holding
// len(b)/dt.Size() elements of dt. Its Free does nothing to b. b must not
// be touched while work using the Buffer is pending. len(b) must be a
// whole number of elements and b aligned to dt.Size().
func (d *Device) Wrap(dt reduceop.DType, b []byte) (*Buffer, error) {
	if err := d.check("wrap"); err != nil {
		return nil, err
	}
	if !dt.Valid() {
		return nil, d.errorf("wrap", "invalid dtype %v", dt)
	}
	if len(b)%dt.Size() != 0 {
		return nil, d.errorf("wrap", "%d bytes is not a whole number of %v", len(b), dt)
	}
	if len(b) > 0 && addr(b)%uintptr(dt.Size()) != 0 {
		return nil, d.errorf("wrap", "memory not aligned to %d bytes for %v", dt.Size(), dt)
	}
	mem := b[:len(b):len(b)]
	return &Buffer{a: &alloc{d: d, mem: mem}, root: true, dt: dt, n: len(b) / dt.Size(), mem: mem}, nil
}

// AllocHost allocates n bytes of "page-locked" host memory: plain Go
// memory, 16-byte aligned, that the device remembers until Free so that its
// asynchronous copies accept it.
func (d *Device) AllocHost(n int) (device.Host, error) {
	if err := d.check("alloc host"); err != nil {
		return nil, err
	}
	if n < 0 || n > math.MaxInt-align {
		return nil, d.errorf("alloc host", "%d bytes: invalid length", n)
	}
	h := &Host{d: d, b: alignedBytes(n)}
	if n == 0 {
		return h, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, d.errorf("alloc host", ErrClosed)
	}
	i := sort.Search(len(d.hosts), func(i int) bool { return d.hosts[i].addr() > h.addr() })
	d.hosts = append(d.hosts, nil)
	copy(d.hosts[i+1:], d.hosts[i:])
	d.hosts[i] = h
	return h, nil
}

// pinned returns the live Host that holds all of b, or an error wrapping
// ErrNotPinned. An empty b needs none: it returns nil, nil.
func (d *Device) pinned(op string, b []byte) (*Host, error) {
	if len(b) == 0 {
		return nil, nil
	}
	p := addr(b)
	d.mu.Lock()
	i := sort.Search(len(d.hosts), func(i int) bool { return d.hosts[i].addr() > p })
	var h *Host
	if i > 0 {
		h = d.hosts[i-1]
	}
	d.mu.Unlock()
	if h == nil || p+uintptr(len(b)) > h.addr()+uintptr(len(h.b)) {
		return nil, d.errorf(op, "%d host bytes: %w", len(b), ErrNotPinned)
	}
	return h, nil
}

// unpin forgets h.
func (d *Device) unpin(h *Host) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.hosts {
		if x == h {
			d.hosts = append(d.hosts[:i], d.hosts[i+1:]...)
			return
		}
	}
}

// addr returns the address of b's first byte, for comparisons only.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// alignedBytes returns n zero bytes starting at a multiple of align.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	b := make([]byte, n+align-1)
	skip := int(-addr(b) & (align - 1))
	return b[skip : skip+n : skip+n]
}

// NewStream starts a stream: a goroutine that runs the work enqueued on it
// in order until the stream is destroyed or the device closed.
func (d *Device) NewStream() (device.Stream, error) {
	if err := d.check("new stream"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, d.errorf("new stream", ErrClosed)
	}
	s := &Stream{d: d, id: d.streams, wake: make(chan struct{}, 1), progress: make(chan struct{})}
	d.streams++
	d.wg.Add(1)
	go s.run()
	return s, nil
}

// NewEvent creates an event, complete until first recorded.
func (d *Device) NewEvent() (device.Event, error) {
	if err := d.check("new event"); err != nil {
		return nil, err
	}
	return &Event{d: d}, nil
}
