// A type of your own named `State` is data, not haip's injected state: without
// derives it is reported as a parameter, not as something to inject.
struct State<T> {
    value: T,
}

#[haip::haip_tool]
async fn store(state: State<u32>) -> u32 {
    state.value
}

fn main() {}
