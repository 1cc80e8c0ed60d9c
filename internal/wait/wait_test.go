package wait_test

import (
	"context"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/wait"
)

func TestSleep(t *testing.T) {
	if !wait.Sleep(t.Context(), time.Millisecond) {
		t.Error("Sleep with a live context reported it ended")
	}
	if !wait.Sleep(t.Context(), 0) {
		t.Error("Sleep(0) with a live context reported it ended")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if wait.Sleep(ctx, 0) {
		t.Error("Sleep(0) with an ended context reported it live")
	}
	// An hour's sleep returns as soon as its context ends.
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan bool)
	go func() { done <- wait.Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case live := <-done:
		if live {
			t.Error("Sleep whose context ended reported it live")
		}
	case <-time.After(time.Minute):
		t.Fatal("Sleep did not return when its context ended")
	}
}
