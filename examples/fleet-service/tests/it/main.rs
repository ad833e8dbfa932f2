//! The tests of the fleet example, as one test binary: a killed service restarted under its
//! worker id finishes the runs it left (in process, on the memory store), and the binary
//! itself serving requests and stopping on SIGTERM.

mod process;
mod restart;
