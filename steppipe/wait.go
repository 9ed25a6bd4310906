package steppipe

// A gate is where the consumer, or a worker, waits for the pipeline's state
// to change. Its waits block the calling thread in the operating system
// (a futex on Linux) instead of parking the goroutine in the Go scheduler.
//
// The difference is who runs next. A goroutine the Go scheduler wakes goes
// to the waking goroutine's P, to run when that one blocks: a worker that
// finished a step and woke the consumer went straight on to its next
// gather, and the consumer (a C thread calling in, locked to its thread)
// waited for it, 250-460 µs a step in an execution trace of batches of
// 1 MiB on two cores, where the step itself took 150 µs. A thread the
// kernel wakes takes its own P back (the pipeline keeps one P for the
// caller: see the capi package) and runs at once.
//
// The gate of this file's build (a futex on Linux, a channel elsewhere)
// has four methods. With the pipeline's lock held: token, what a waiter
// reads before it lets the lock go; open, which records a change. Without
// it: flush, called after the lock is let go by whoever opened the gate,
// which wakes the waiters; and wait(token, timeout), which blocks while
// nothing changed since the token was read, at most timeout (none when
// timeout <= 0), and may return early, as a condition variable may.
//
// The waking is left until the lock is let go because a waiter's first
// act is to take the lock: woken while the waker still held it, the
// consumer found the lock taken and parked on it in the Go scheduler,
// which is the wait the gate exists to avoid (133 of 150 wake-ups in the
// trace, before).
