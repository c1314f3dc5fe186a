package rendezvous

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/goccl/goccl/transport"
)

// Round is the store side of one round of Shrink in a rendezvous's
// epoch: the keys under goccl/<job>/<epoch>shrink/, what a member writes
// there and how it reads what the others wrote. When to read them, who
// is in and what to do about a member lost are Shrink's (the root's).
type Round struct{ r *Rendezvous }

// Round returns the Shrink round of r's epoch.
func (r *Rendezvous) Round() Round { return Round{r} }

// Key names a key of the round.
func (s Round) Key(name string) string { return s.r.EpochKey("shrink/" + name) }

// Register registers this process in the round: it takes the next slot
// (joined, slot/<i>) and says which job ranks it knows to be lost
// (lost/<jr>). 2+len(lost) store requests.
func (s Round) Register(ctx context.Context, lost []int) error {
	st := s.r.st.st
	slot, err := st.Add(ctx, s.Key("joined"), 1)
	if err != nil {
		return err
	}
	if err := st.Set(ctx, s.Key("slot/"+strconv.FormatInt(slot, 10)), []byte(strconv.Itoa(s.r.JobRank))); err != nil {
		return err
	}
	for _, jr := range lost {
		if err := st.Set(ctx, s.Key("lost/"+strconv.Itoa(jr)), []byte{1}); err != nil {
			return err
		}
	}
	return nil
}

// Joined returns how many processes have registered so far.
func (s Round) Joined(ctx context.Context) (int64, error) {
	return s.r.st.st.Add(ctx, s.Key("joined"), 0)
}

// Registered returns the job rank of the i-th registration (from 1).
func (s Round) Registered(ctx context.Context, i int64) (int, error) {
	v, err := s.r.st.st.Get(ctx, s.Key("slot/"+strconv.FormatInt(i, 10)))
	if err != nil {
		return 0, err
	}
	jr, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, fmt.Errorf("%w: bad shrink slot %q", transport.ErrProtocol, v)
	}
	return jr, nil
}

// Blamed reports whether a registered member said job rank jr is lost.
func (s Round) Blamed(ctx context.Context, jr int) (bool, error) {
	v, err := peek(ctx, s.r.st.st, s.Key("lost/"+strconv.Itoa(jr)))
	return v != nil, err
}

// Propose proposes members (sorted job ranks) as the round's and returns
// the members agreed: the first proposal made, which every later one
// reads.
func (s Round) Propose(ctx context.Context, members []int) ([]int, error) {
	var b strings.Builder
	for i, jr := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(jr))
	}
	got, err := s.r.st.st.CompareSet(ctx, s.Key("members"), nil, []byte(b.String()))
	if err != nil {
		return nil, err
	}
	var agreed []int
	for f := range strings.SplitSeq(string(got), ",") {
		jr, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%w: bad shrink member list %q", transport.ErrProtocol, got)
		}
		agreed = append(agreed, jr)
	}
	return agreed, nil
}

// wordKey is where member jr says how its connecting went.
func (s Round) wordKey(jr int) string { return s.Key("status/" + strconv.Itoa(jr)) }

// Say says how this member's connecting went: nil, it made it ("ok");
// else why not. A word is final once written.
func (s Round) Say(ctx context.Context, err error) error {
	say := []byte("ok")
	if err != nil {
		say = []byte("failed: " + err.Error())
	}
	return s.r.st.st.Set(ctx, s.wordKey(s.r.JobRank), say)
}

// Status reads what members said of their connecting: again says why the
// round must be tried again (a member failed, or died without a word:
// only a store that tracksAlive tells), and waiting whether some live
// member has not said yet.
func (s Round) Status(ctx context.Context, members []int, tracksAlive bool) (again string, waiting bool, err error) {
	for _, jr := range members {
		// Whether it is dead first, then its word: a member dead before
		// its word was read can no longer write one.
		d := false
		if tracksAlive {
			alive, err := s.r.Alive(ctx, jr)
			if err != nil {
				return "", false, err
			}
			d = !alive
		}
		w, err := peek(ctx, s.r.st.st, s.wordKey(jr))
		switch {
		case err != nil:
			return "", false, err
		case w == nil && d:
			return fmt.Sprintf("job rank %d died", jr), false, nil
		case w == nil:
			waiting = true
		case string(w) != "ok":
			return fmt.Sprintf("job rank %d %s", jr, w), false, nil
		}
	}
	return "", waiting, nil
}
