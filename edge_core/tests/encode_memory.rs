//! What a response being compressed holds (src/encode.rs): its compressor's state, counted
//! by this test binary's allocator, and given back when the body ends (docs/SECURITY.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use edge_core::encode::{Encoder, Encoding};

struct Counting;

thread_local! {
    // bytes this thread holds (a thread's own count: other tests' threads do not add to it)
    static HELD: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = HELD.try_with(|h| h.set(h.get() + layout.size() as isize));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = HELD.try_with(|h| h.set(h.get() - layout.size() as isize));
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> isize {
    HELD.with(|h| h.get())
}

/// The bound docs/SECURITY.md states per response being compressed.
const BOUND: isize = 400 * 1024;

#[test]
fn a_compressor_holds_its_state_alone_and_gives_it_back_at_the_end() {
    let text = b"the quick brown fox jumps over the lazy dog ".repeat(20_000); // 880,000 bytes
    for encoding in [Encoding::Gzip, Encoding::Deflate] {
        let before = held();
        let mut enc = Encoder::new(encoding);
        let mut most = 0;
        for piece in text.chunks(64 * 1024) {
            let out = enc.feed(piece);
            most = most.max(held() - before);
            drop(out); // sent: the relay keeps none of it
        }
        let tail = enc.finish();
        drop(tail);
        // counted before printing: the test harness's capture of the line allocates too
        let left = held() - before;
        eprintln!("{encoding:?}: at most {most} bytes held");
        // however long the body, what one compressor holds stays its state's size
        assert!(most < BOUND, "{encoding:?}: {most} bytes held");
        assert!(
            most > 64 * 1024,
            "{encoding:?}: {most} bytes: nothing counted?"
        );
        assert_eq!(left, 0, "{encoding:?}: not all given back");
    }
}
