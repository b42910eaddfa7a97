//! (ported in a following commit)
