/* The former name of <percpu/malloc.h>, kept for one release: include <percpu/malloc.h>. */
#include "percpu/malloc.h"
