package goccl

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// callCtx ends at the earlier of its timeout and its parent's deadline,
// reports both through Deadline, Err and Done, and takes a timeout of
// centuries without overflowing into the past.
func TestCallCtx(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		var c callCtx
		before := time.Now()
		c.init(context.Background(), 20*time.Millisecond)
		defer c.release()
		d, ok := c.Deadline()
		if !ok || d.Before(before.Add(20*time.Millisecond)) || d.After(time.Now().Add(20*time.Millisecond)) {
			t.Fatalf("Deadline = %v, %v; want 20ms after init", d, ok)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline: %v", err)
		}
		time.Sleep(time.Until(d) + time.Millisecond)
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err after the deadline: %v", err)
		}
		<-c.Done() // armed after the deadline: closed at once
	})
	t.Run("parent's deadline first", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var c callCtx
		c.init(parent, 2*time.Hour)
		defer c.release()
		want, _ := parent.Deadline()
		if d, _ := c.Deadline(); !d.Equal(want) {
			t.Fatalf("Deadline = %v, want the parent's %v", d, want)
		}
		cancel()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err after the parent was cancelled: %v", err)
		}
	})
	t.Run("centuries", func(t *testing.T) {
		var c callCtx
		c.init(context.Background(), math.MaxInt64)
		defer c.release()
		if err := c.Err(); err != nil {
			t.Fatalf("Err: %v", err)
		}
		if d, _ := c.Deadline(); d.Before(time.Now().AddDate(200, 0, 0)) {
			t.Fatalf("Deadline = %v, want centuries away", d)
		}
		select {
		case <-c.Done():
			t.Fatal("Done closed")
		default:
		}
	})
}
