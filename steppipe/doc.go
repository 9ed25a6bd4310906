// Package steppipe makes a data loader's steps ahead of its consumer.
//
// A [Pipeline] owns a few worker goroutines. Each claims the next step
// inside the prefetch window, takes a free slot (a set of caller-owned
// buffers: the step's indices, and per stream the bytes of its batch), draws
// the step's indices ([Sampler] or [Epoch]), gathers every stream into the
// slot and publishes it. The consumer's [Pipeline.Next] hands the steps out
// strictly in step order, so what a step holds depends only on the draw and
// the step, never on the number of workers or on which worker made it.
//
// A slot handed out belongs to the consumer until it gives it back
// ([Pipeline.Next]'s release list, or [Pipeline.Replace] with other
// buffers); the workers never write a slot the consumer holds. A step whose
// draw or gather fails is handed out as a [StepError] naming the step and
// the stream, in its place in the order, and its slot goes straight back to
// the free list: the consumer never sees a partly filled batch.
//
// The buffers are the caller's memory (the Python binding passes NumPy
// arrays), which the package only reads and writes between [New] and the
// return of [Pipeline.Close]: Close waits for every worker to finish the
// gather it is in, after which nothing of the pipeline runs or refers to a
// buffer. [Live] counts the workers of every pipeline still running, so a
// test can check that none is left behind.
//
// A stream may also be Packed: its source makes the stream's whole step
// from its own plan of which records the step holds (package steppack's
// concat packing), and a pipeline of packed streams draws nothing. Such a
// source knows only the steps its plan reaches, so the pipeline may be
// Limited: workers claim no step at or past the limit, which
// [Pipeline.SetLimit] raises as the plan grows, and Next returns
// [ErrUnplanned] for the next step when it is past it.
//
// Next waits at most the timeout it is given and returns [ErrPending] when
// the step is not ready by then, so that a caller that must look at signals
// now and then (a Python interpreter waiting for Ctrl-C) gets control back.
package steppipe
