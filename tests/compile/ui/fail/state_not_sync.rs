use std::cell::Cell;

use haip::State;

// Injected state is shared between calls on many threads.
struct Counter(Cell<u32>);

#[haip::haip_tool]
async fn count(counter: State<Counter>) -> u32 {
    counter.0.get()
}

fn main() {}
