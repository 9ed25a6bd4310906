//go:build !linux

package steppipe

import (
	"sync/atomic"
	"time"
)

// gate, outside Linux: a channel closed, and replaced, at every change.
// Its waiters park in the Go scheduler (see wait.go for what that costs
// the consumer on a machine whose cores the workers keep busy).
type gate struct {
	ch    chan struct{}
	wakes atomic.Int64 // channels closed with a waiter possible (for tests)
}

type gateToken = chan struct{}

func (g *gate) token() gateToken {
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *gate) open() {
	if g.ch != nil {
		g.wakes.Add(1)
		close(g.ch)
		g.ch = nil
	}
}

func (g *gate) flush() {}

func (g *gate) wait(ch gateToken, timeout time.Duration) {
	if timeout <= 0 {
		<-ch
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}
