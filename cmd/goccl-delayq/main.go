//go:build linux

// Command goccl-delayq adds a one-way delay to the packets that netfilter
// queues to it, for scripts/hosts-bench.sh's emulated hosts (issue 37):
// the kernel there has no sch_netem, and a queue to user space is the
// delay it has. It binds one NFQUEUE queue over netlink (metadata only,
// the packet's bytes stay in the kernel), stamps each packet as it reads
// it, and accepts it once the delay has passed since that stamp, in the
// order the packets came. Put it behind a rule such as
//
//	iptables -t mangle -A POSTROUTING -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass
//
// and run it in the same network namespace:
//
//	goccl-delayq [-queue 0] [-delay 100us] [-maxlen 65536]
//
// The holder's own pass (the kernel waking it, the read, the verdict)
// adds to the delay; hosts-bench measures it with -delay 0 and asks for
// the difference. Two more modes measure it, a TCP ping-pong of one byte:
//
//	goccl-delayq pong ADDR                  echo on ADDR until killed
//	goccl-delayq ping [-n 2000] [-w 200] ADDR   print "median min p90" round trip in us
//
// On SIGTERM or SIGINT the holder accepts what it holds, prints what it
// did to stderr, and exits.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	var err error
	if len(os.Args) > 1 && (os.Args[1] == "ping" || os.Args[1] == "pong") {
		err = pingMain(os.Args[1], os.Args[2:])
	} else {
		err = holdMain(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goccl-delayq:", err)
		os.Exit(1)
	}
}

func holdMain(args []string) error {
	fs := flag.NewFlagSet("goccl-delayq", flag.ExitOnError)
	queue := fs.Uint("queue", 0, "NFQUEUE queue number (iptables --queue-num)")
	delay := fs.Duration("delay", 0, "how long to hold each packet, from when it is read")
	maxlen := fs.Uint("maxlen", 65536, "packets the kernel may hold for the queue before it drops")
	fs.Parse(args)
	if *queue > 0xffff {
		return fmt.Errorf("-queue %d: queues are numbered below 65536", *queue)
	}
	if *delay < 0 {
		return fmt.Errorf("-delay %v: negative", *delay)
	}

	// The sleeps are ppoll's, on this one thread: lock it, and ask for
	// 1 ns of timer slack rather than the 50 us a thread gets by default,
	// which would be half a 100 us delay.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}

	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		unix.Write(stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}()

	h, err := newHolder(uint16(*queue), uint32(*maxlen), *delay)
	if err != nil {
		return err
	}
	defer unix.Close(h.fd)
	err = h.run(stop)
	fmt.Fprintf(os.Stderr, "goccl-delayq: queue %d, delay %v: %d packets, %d verdicts, most held at once %d; released late by %v on average, %v median, %v p90, %v at most (early by %v at most); timed wakes asked %v early; %d errors reported\n",
		*queue, *delay, h.packets, h.verdicts, h.most, h.lateAvg(), h.lateQuantile(0.5), h.lateQuantile(0.9), time.Duration(h.lateMax), time.Duration(-h.lateMin), time.Duration(h.early), h.reported)
	return err
}

// held is a packet waiting: its id and when it may go (ns on h's clock).
type held struct {
	id  uint32
	due int64
}

type holder struct {
	fd    int
	queue uint16
	delay int64
	seq   uint32
	start time.Time
	buf   []byte
	fifo  []held // fifo[head:] wait, oldest first; due times rise with the index
	head  int

	// early is how long before a packet's due time the holder asks to
	// be woken: its running estimate of the median lateness of a timed
	// wake (tens of us in a VM, more on a busy machine), so that half the
	// releases come before their time and half after, rather than all of
	// them that much after.
	early int64

	packets, verdicts, reported int64
	most                        int
	lateSum, lateMax, lateMin   int64
	// lateHist counts releases by lateness in whole microseconds, from
	// -lateSpan (early) to +lateSpan, the ends taking everything beyond.
	lateHist [2*lateSpan + 1]int64
}

const lateSpan = 2000

func newHolder(queue uint16, maxlen uint32, delay time.Duration) (*holder, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	h := &holder{fd: fd, queue: queue, delay: int64(delay), start: time.Now(), buf: make([]byte, 1<<16)}
	if err := h.setup(maxlen); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return h, nil
}

func (h *holder) setup(maxlen uint32) error {
	if err := unix.Bind(h.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	// A full socket buffer makes the kernel drop the packet it could not
	// report: ask for 8 MiB (thousands of reports) past rmem_max, as root
	// may, and take what the plain option gives otherwise.
	if err := unix.SetsockoptInt(h.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		unix.SetsockoptInt(h.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	// An overrun is then the kernel's drop, which TCP repairs; without
	// this the next read would fail with ENOBUFS as well.
	if err := unix.SetsockoptInt(h.fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1); err != nil {
		return fmt.Errorf("NETLINK_NO_ENOBUFS: %w", err)
	}
	h.seq++
	seq := h.seq
	if err := h.send(configMessage(seq, h.queue, maxlen)); err != nil {
		return fmt.Errorf("bind queue %d: %w", h.queue, err)
	}
	// Wait for the kernel's answer; packets that come first (the rule may
	// already be in place) are held like any other.
	for {
		n, _, err := unix.Recvfrom(h.fd, h.buf, 0)
		if err != nil {
			return fmt.Errorf("bind queue %d: %w", h.queue, err)
		}
		var answer *unix.Errno
		err = parse(h.buf[:n], func(ev event) {
			switch {
			case ev.packet:
				h.hold(ev.id, h.now())
			case ev.seq == seq:
				answer = &ev.errno
			}
		})
		if err != nil {
			return err
		}
		if answer != nil {
			if *answer != 0 {
				// EBUSY: another socket holds the queue.
				return fmt.Errorf("bind queue %d: %w", h.queue, *answer)
			}
			return nil
		}
	}
}

func (h *holder) send(b []byte) error {
	return unix.Sendto(h.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

func (h *holder) now() int64 { return int64(time.Since(h.start)) }

func (h *holder) hold(id uint32, now int64) {
	h.fifo = append(h.fifo, held{id: id, due: now + h.delay})
	h.packets++
	h.most = max(h.most, len(h.fifo)-h.head)
}

// release accepts every packet due by now with one batch verdict.
func (h *holder) release(now int64) error {
	i := h.head
	for i < len(h.fifo) && h.fifo[i].due-h.early <= now {
		late := now - h.fifo[i].due
		h.lateSum += late
		h.lateMax = max(h.lateMax, late)
		h.lateMin = min(h.lateMin, late)
		h.lateHist[min(max(late/1000, -lateSpan), lateSpan)+lateSpan]++
		i++
	}
	if i == h.head {
		return nil
	}
	h.seq++
	if err := h.send(verdictBatchMessage(h.seq, h.queue, h.fifo[i-1].id)); err != nil {
		return fmt.Errorf("verdict: %w", err)
	}
	h.verdicts++
	h.head = i
	if h.head == len(h.fifo) {
		h.fifo, h.head = h.fifo[:0], 0
	} else if h.head > 4096 && h.head > len(h.fifo)/2 {
		h.fifo, h.head = h.fifo[:copy(h.fifo, h.fifo[h.head:])], 0
	}
	return nil
}

// learn moves early a microsecond towards a timed wake's lateness: a
// running median, which one slow wake (a millisecond when the machine is
// busy) moves no more than a fast one. A running mean moved by such a
// wake overshot the delay on the first try, and past the delay no wake
// is timed, so nothing brought it back. Kept under the delay for the
// same reason.
func (h *holder) learn(late int64) {
	const step = int64(time.Microsecond)
	if late > h.early {
		h.early = min(h.early+step, max(h.delay-step, 0))
	} else if late < h.early {
		h.early = max(h.early-step, 0)
	}
}

// flush accepts everything held, due or not.
func (h *holder) flush() error {
	if h.head == len(h.fifo) {
		return nil
	}
	h.seq++
	if err := h.send(verdictBatchMessage(h.seq, h.queue, h.fifo[len(h.fifo)-1].id)); err != nil {
		return fmt.Errorf("verdict: %w", err)
	}
	h.fifo, h.head = h.fifo[:0], 0
	return nil
}

// lateQuantile is the lateness that a fraction q of the releases came
// by, to the microsecond.
func (h *holder) lateQuantile(q float64) time.Duration {
	var n int64
	for _, c := range h.lateHist {
		n += c
	}
	if n == 0 {
		return 0
	}
	want, seen := int64(q*float64(n)), int64(0)
	for i, c := range h.lateHist {
		if seen += c; seen > want {
			return time.Duration(i-lateSpan) * time.Microsecond
		}
	}
	return lateSpan * time.Microsecond
}

func (h *holder) lateAvg() time.Duration {
	if h.packets == 0 {
		return 0
	}
	return time.Duration(h.lateSum / h.packets) // negative: early
}

// run holds and releases until stop is readable, then accepts whatever
// it still holds: a packet left in the queue when the socket closes is
// dropped by the kernel.
func (h *holder) run(stop int) error {
	fds := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN}, {Fd: int32(stop), Events: unix.POLLIN}}
	var ts unix.Timespec
	for {
		now := h.now()
		if err := h.release(now); err != nil {
			return err
		}
		timeout := (*unix.Timespec)(nil) // nothing held: sleep until a packet comes
		wake := int64(0)
		if h.head < len(h.fifo) {
			wake = h.fifo[h.head].due - h.early
			ts = unix.NsecToTimespec(wake - now)
			timeout = &ts
		}
		n, err := unix.Ppoll(fds, timeout, nil)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("ppoll: %w", err)
		}
		if n == 0 && timeout != nil {
			h.learn(h.now() - wake)
		}
		if fds[1].Revents != 0 {
			return h.flush()
		}
		if fds[0].Revents == 0 {
			continue
		}
		// Read everything there is before releasing: one verdict then
		// covers all that came together.
		for {
			n, _, err := unix.Recvfrom(h.fd, h.buf, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				break
			}
			if err != nil {
				return fmt.Errorf("netlink receive: %w", err)
			}
			now := h.now()
			err = parse(h.buf[:n], func(ev event) {
				if ev.packet {
					h.hold(ev.id, now)
				} else if ev.errno != 0 {
					h.reported++
					if h.reported <= 10 {
						fmt.Fprintf(os.Stderr, "goccl-delayq: queue %d: the kernel refused request %d: %v\n", h.queue, ev.seq, ev.errno)
					}
				}
			})
			if err != nil {
				return err
			}
		}
	}
}
