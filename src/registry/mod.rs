//! OCI distribution-spec v1.1 routes.
