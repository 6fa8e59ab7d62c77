package repo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestHousekeepingLockExcludes(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	seed(t, m, 1)
	unlock, err := lockHousekeeping(ctx, m.Path(1), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockHousekeeping(ctx, m.Path(1), false); !errors.Is(err, errBusy) {
		t.Fatalf("second lock: %v, want errBusy", err)
	}
	// The job skips a repository being housekept elsewhere…
	if ran, err := m.HousekeepIfNeeded(ctx, 1); err != nil || ran {
		t.Fatalf("HousekeepIfNeeded while locked: ran=%v err=%v", ran, err)
	}
	// …and an on-demand run waits for it, giving up with its context.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := m.HousekeepWithStats(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("HousekeepWithStats while locked: %v", err)
	}
	unlock()
	if _, err := m.HousekeepWithStats(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

func TestNeedsHousekeeping(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	w, _ := seed(t, m, 1)
	if _, err := m.HousekeepWithStats(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if need, err := m.NeedsHousekeeping(1); err != nil || need {
		t.Fatalf("freshly housekept: need=%v err=%v", need, err)
	}
	if ran, err := m.HousekeepIfNeeded(ctx, 1); err != nil || ran {
		t.Fatalf("HousekeepIfNeeded on a repository in shape: ran=%v err=%v", ran, err)
	}
	// Push a second pack: geometric repacking has work to do again.
	for i := 0; i < 3; i++ {
		w.write(fmt.Sprintf("more%d.txt", i), fmt.Sprintf("content %d", i))
		w.commit(fmt.Sprintf("more %d", i))
	}
	// A small push arrives as loose objects; force a pack as a large one
	// would arrive.
	w.git("push", "-q", "--receive-pack=git -c receive.unpackLimit=1 receive-pack", m.Path(1), "HEAD:refs/heads/more")
	if need, err := m.NeedsHousekeeping(1); err != nil || !need {
		t.Fatalf("after pushes: need=%v err=%v", need, err)
	}
	if ran, err := m.HousekeepIfNeeded(ctx, 1); err != nil || !ran {
		t.Fatalf("HousekeepIfNeeded after pushes: ran=%v err=%v", ran, err)
	}
}
