//! HTTP listener.
