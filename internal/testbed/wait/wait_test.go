package wait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	var n atomic.Int32
	For(t, "three polls", time.Second, func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Errorf("polled %d times, want 3", n.Load())
	}

	// A condition that never holds fails the test, naming it.
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		For(ft, "never", 30*time.Millisecond, func() bool { return false })
	}()
	<-done
	if ft.msg == "" {
		t.Fatal("a condition that never held did not fail the test")
	}
}

// fakeT records Fatalf instead of ending the real test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = format
	panic("fatal")
}
