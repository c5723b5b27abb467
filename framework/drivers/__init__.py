"""Drivers: what moves training forward between two of the runner's cadence points.

`driver.Driver` is the interface; `synchronous.SynchronousDriver` steps one vector environment
and updates the agent in the same thread, `asynchronous.AsynchronousDriver` has workers compute
gradients on their own environments and applies them centrally (`backends`: in turn, threads,
processes, Ray actors). The runner picks one with `Runner.driver`.
"""
